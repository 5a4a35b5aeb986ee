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
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		fds, err := os.ReadDir("/proc/" + p.Name() + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink("/proc/" + p.Name() + "/fd/" + fd.Name())
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
				cmdline, _ := os.ReadFile("/proc/" + p.Name() + "/cmdline")
				args := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
				if len(args) > 120 {
					args = args[:120] + "…"
				}
				comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm")
				return fmt.Sprintf("%s (pid %s): %s", strings.TrimSpace(string(comm)), p.Name(), args)
			}
		}
	}
	return "another process"
}
