package pause

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// procState returns the state letter of process pid in /proc (R, S, Z, ...), 0 if it is gone.
func procState(pid int) byte {
	st, _, ok := procStat(pid)
	if !ok {
		return 0
	}
	return st
}

// procStat reads the state and parent of pid from /proc/pid/stat.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses, so cut at the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	return fields[0][0], ppid, err == nil
}

// children returns the state letter of each child of parent, by pid.
func children(t *testing.T, parent int) map[int]byte {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]byte{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ppid, ok := procStat(pid); ok && ppid == parent {
			out[pid] = st
		}
	}
	return out
}
