package cli

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/clock"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// invocation is one run of the CLI in a test.
type invocation struct {
	args  []string
	env   map[string]string
	stdin io.Reader
	sigs  <-chan os.Signal
	poll  time.Duration // 0: an hour, so only events drive the sidecar commands
	pid   int
	clock clock.WithDelayedExecution // nil: the system's suspend-aware clock

	stdout, stderr testenv.SyncBuffer
	code           int
	done           chan struct{}
}

// start runs the CLI in the background.
func start(t *testing.T, inv *invocation) *invocation {
	t.Helper()
	env := func(k string) string { return inv.env[k] }
	p := newProgram(env, inv.stdin, &inv.stdout, &inv.stderr)
	p.poll = inv.poll
	if p.poll == 0 {
		p.poll = time.Hour
	}
	if inv.pid != 0 {
		p.pid = inv.pid
	}
	if inv.clock != nil {
		p.clock = inv.clock
	}
	ctx, cancel := context.WithCancel(context.Background())
	inv.done = make(chan struct{})
	go func() {
		defer close(inv.done)
		inv.code = p.main(ctx, inv.sigs, inv.args)
	}()
	t.Cleanup(func() {
		cancel()
		<-inv.done
	})
	return inv
}

// wait waits for the CLI to exit and returns its exit code.
func (inv *invocation) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-inv.done:
		return inv.code
	case <-time.After(timeout):
		t.Fatalf("baton %s did not exit within %v\nstdout: %s\nstderr: %s", strings.Join(inv.args, " "),
			timeout, inv.stdout.String(), inv.stderr.String())
		return -1
	}
}

// runCLI runs the CLI to completion.
func runCLI(t *testing.T, inv *invocation) *invocation {
	t.Helper()
	start(t, inv).wait(t, time.Minute)
	return inv
}
