package stack

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// PortHolder names the process listening on a TCP port ("java (pid 123):
// java -jar …"), or "" when it cannot tell (another user's process, say).
// It reads /proc instead of running ss so it works wherever the stack does.
func PortHolder(port int) string {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes[fields[9]] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return ""
	}
	procs, _ := processes()
	for _, p := range procs {
		dir := "/proc/" + strconv.Itoa(p.pid)
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(dir + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				cmdline, _ := os.ReadFile(dir + "/cmdline")
				args := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
				if len(args) > 120 {
					args = args[:120] + "…"
				}
				comm, _ := os.ReadFile(dir + "/comm")
				return fmt.Sprintf("%s (pid %d): %s", strings.TrimSpace(string(comm)), p.pid, args)
			}
		}
	}
	return "another process"
}
