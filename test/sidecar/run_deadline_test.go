package main_test

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestBatonRunThroughAPausedSidecar: `baton run` under a real Blocking-mode sidecar whose process
// is then stopped (SIGSTOP: it neither renews nor answers). The command ignores SIGTERM and
// --grace is a minute, yet baton run kills its process group by the lease's deadline as the
// sidecar last reported it, before anyone else could be granted the lock (issue 13, item 6).
func TestBatonRunThroughAPausedSidecar(t *testing.T) {
	batonBin := filepath.Join(t.TempDir(), "baton")
	if out, err := exec.Command("go", "build", "-o", batonBin, "github.com/baton-dev/baton/cmd/baton").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/baton: %v\n%s", err, out)
	}
	sc := startSidecar(t, fmt.Sprintf("e2e-%d", time.Now().UnixNano()), "paused")
	onlyHolder(t, []*sidecarProc{sc}, 10*time.Second)

	run := exec.Command(batonBin, "run", "--socket", sc.socket, "--lock", "orders", "--grace", "1m", "--",
		"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	stdout, stderr := &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
	run.Stdout, run.Stderr = stdout, stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() { _ = run.Process.Kill() })
	testenv.WaitFor(t, "the command to start", 10*time.Second, func() bool { return strings.Contains(stdout.String(), "ready") })

	paused := time.Now()
	if err := sc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer sc.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case err := <-exited:
		took := time.Since(paused)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 75 {
			t.Fatalf("baton run: %v, want exit 75; stderr: %s", err, stderr.String())
		}
		t.Logf("baton run exited %v after the sidecar was stopped (lease %v): %s", took.Round(10*time.Millisecond), lease, strings.TrimSpace(stderr.String()))
		if took > lease {
			t.Errorf("the command ran %v after the sidecar stopped; the lease is %v", took, lease)
		}
		if !strings.Contains(stderr.String(), "SIGKILL at") {
			t.Errorf("stderr %q does not say the group was killed", stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("baton run still ran 30 s after the sidecar was stopped; stderr: %s", stderr.String())
	}
}
