package tasks

import (
	"errors"
	"strings"
	"testing"
)

// FuzzName checks the task name of any entry id and attempt: at most
// MaxNameLen characters of [A-Za-z0-9_-] (what Cloud Tasks accepts), distinct
// per attempt, and reversible by ParseName unless it had to be hashed.
func FuzzName(f *testing.F) {
	f.Add("TASKS.42", 1)
	f.Add("A_B%2F.7", 3)
	f.Add(strings.Repeat("x", 600), 2)
	f.Add("", 1)
	f.Add("\xff\x00_x", 9)
	f.Fuzz(func(t *testing.T, entryID string, attempt int) {
		if attempt < 1 {
			attempt = 1 - attempt%1000
		}
		name := Name(entryID, attempt)
		if len(name) > MaxNameLen {
			t.Fatalf("Name(%q, %d) has %d characters, more than %d", entryID, attempt, len(name), MaxNameLen)
		}
		if strings.IndexFunc(name, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			t.Fatalf("Name(%q, %d) = %q has characters Cloud Tasks refuses", entryID, attempt, name)
		}
		if Name(entryID, attempt+1) == name {
			t.Fatalf("Name(%q) is the same for attempts %d and %d", entryID, attempt, attempt+1)
		}
		id, n, err := ParseName("projects/p/locations/l/queues/q/tasks/" + name)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("ParseName(Name(%q, %d)) error %v does not wrap ErrBadName", entryID, attempt, err)
			}
			if !strings.Contains(name, "-_h") {
				t.Fatalf("ParseName(%q) = %v; only hashed names may be irreversible", name, err)
			}
			return
		}
		if id != entryID || n != attempt {
			t.Fatalf("ParseName(Name(%q, %d)) = %q, %d", entryID, attempt, id, n)
		}
	})
}

// FuzzParseName feeds arbitrary task names (a task name arrives in the
// X-CloudTasks-TaskName header and from queue listings). Properties: a
// refusal wraps ErrBadName; an accepted name is exactly the one Name makes
// for what it returns, so two different names never map to one attempt.
func FuzzParseName(f *testing.F) {
	f.Add(Name("TASKS.42", 1))
	f.Add("projects/p/locations/l/queues/q/tasks/" + Name("A_B.1", 2))
	f.Add("deadbeef-TASKS_d42-r0")
	f.Add("deadbeef-TASKS_d42-r01")
	f.Add("foreign-task")
	f.Fuzz(func(t *testing.T, name string) {
		id, attempt, err := ParseName(name)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("ParseName(%q) error %v does not wrap ErrBadName", name, err)
			}
			return
		}
		if short := name[strings.LastIndexByte(name, '/')+1:]; Name(id, attempt) != short || attempt < 1 {
			t.Fatalf("ParseName(%q) = %q, %d; Name gives %q", name, id, attempt, Name(id, attempt))
		}
	})
}
