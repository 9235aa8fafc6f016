package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestSidecarRetriesUnreachableCassandra: while Cassandra is not reachable yet (a closed port
// here), the sidecar keeps retrying with progress logs, and a SIGTERM then ends it cleanly. Its
// connection retries reuse one driver configuration, which once made the second attempt panic.
func TestSidecarRetriesUnreachableCassandra(t *testing.T) {
	out := &testenv.SyncBuffer{}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS=orders", "BATON_CASSANDRA_HOSTS=127.0.0.1:1", "BATON_TRAFFIC_POLICY=None",
		"POD_NAMESPACE=shop", "POD_NAME=retrying", "POD_UID=uid-retrying",
		"BATON_SOCKET="+filepath.Join(t.TempDir(), "baton.sock"), "BATON_METRICS_ADDR=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "not reachable yet, retrying") < 3 {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the sidecar exited while Cassandra was unreachable (%v):\n%s", err, out.String())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than three connection attempts within 30 s:\n%s", out.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("after SIGTERM while connecting: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the sidecar did not stop within 10 s of SIGTERM while connecting:\n%s", out.String())
	}
}
