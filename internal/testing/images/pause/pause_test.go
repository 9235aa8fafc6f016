package pause

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		signals   []os.Signal
		close     bool
		want      os.Signal
		wantReaps int
	}{
		{"SIGTERM", []os.Signal{syscall.SIGTERM}, false, syscall.SIGTERM, 1},
		{"SIGINT", []os.Signal{syscall.SIGINT}, false, syscall.SIGINT, 1},
		{"SIGCHLD reaps", []os.Signal{syscall.SIGCHLD, syscall.SIGCHLD, syscall.SIGTERM}, false, syscall.SIGTERM, 3},
		{"other signals ignored", []os.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGCHLD}, false, syscall.SIGTERM, 1},
		{"channel closed", []os.Signal{syscall.SIGCHLD}, true, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigs := make(chan os.Signal, len(tc.signals))
			for _, s := range tc.signals {
				sigs <- s
			}
			if tc.close {
				close(sigs)
			}
			reaps := 0
			if got := Run(sigs, func() { reaps++ }); got != tc.want {
				t.Errorf("Run returned %v, want %v", got, tc.want)
			}
			if reaps != tc.wantReaps {
				t.Errorf("reaped %d times, want %d", reaps, tc.wantReaps)
			}
		})
	}
}

func TestReap(t *testing.T) {
	// Children started without os/exec, whose Wait would race with Reap: only Reap collects them.
	var pids []int
	for range 3 {
		pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "exit 0"}, &syscall.ProcAttr{})
		if err != nil {
			t.Fatalf("start /bin/sh: %v", err)
		}
		pids = append(pids, pid)
	}
	// Once every child is a zombie, one Reap collects them all.
	for _, pid := range pids {
		testenv.WaitFor(t, fmt.Sprintf("child %d to exit", pid), 10*time.Second, func() bool { return procState(pid) == 'Z' })
	}
	if n := Reap(); n != len(pids) {
		t.Errorf("Reap collected %d children, want %d", n, len(pids))
	}
	for _, pid := range pids {
		if st := procState(pid); st != 0 {
			t.Errorf("child %d still there (state %c) after Reap", pid, st)
		}
	}
	if n := Reap(); n != 0 {
		t.Errorf("Reap with no children collected %d, want 0", n)
	}
}
