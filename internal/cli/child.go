package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// signalRouter delivers the signals baton receives: to CMD while one runs, else as cancellation
// of the command.
type signalRouter struct {
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	child *os.Process
}

func (r *signalRouter) loop(ctx context.Context, sigs <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case s, ok := <-sigs:
			if !ok {
				return
			}
			r.deliver(s)
		}
	}
}

func (r *signalRouter) deliver(s os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.child != nil {
		_ = r.child.Signal(s) // fails only when CMD already exited
		return
	}
	r.cancel(&interruptedError{sig: s})
}

func (r *signalRouter) setChild(p *os.Process) {
	r.mu.Lock()
	r.child = p
	r.mu.Unlock()
}

// childSpec is the command run holds the lock for.
type childSpec struct {
	argv  []string
	env   []string // added to the process environment, overriding
	grace time.Duration
}

// childResult is how CMD ended.
type childResult struct {
	code    int   // exit code to pass on (128+N when killed by signal N)
	lost    error // non-nil when CMD was stopped because the lock was lost
	stopped bool  // CMD was stopped by baton (lock lost or ctx ended)
	killed  bool  // it needed SIGKILL
}

// supervise runs CMD until it exits, the lock is lost (a value on lost, or lost closing) or ctx
// ends. In the last two cases CMD gets SIGTERM and, if still running after the grace period,
// SIGKILL. Signals baton receives meanwhile are forwarded to CMD.
func (p *program) supervise(ctx context.Context, spec childSpec, lost <-chan error) (childResult, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdin, p.stdout, p.stderr
	cmd.Env = mergeEnv(os.Environ(), spec.env)
	// CMD may leave children behind that keep its output pipes open (only when baton's own
	// stdio is not a file); do not wait for them forever.
	cmd.WaitDelay = spec.grace + time.Second
	if err := cmd.Start(); err != nil {
		code := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = 127
		}
		return childResult{code: code}, fmt.Errorf("cannot start %s: %w", spec.argv[0], err)
	}
	p.signals.setChild(cmd.Process)
	defer p.signals.setChild(nil)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		close(done)
	}()

	var res childResult
	select {
	case <-done:
		res.code = exitCode(cmd.ProcessState)
		return res, nil
	case err, ok := <-lost:
		if !ok || err == nil {
			err = errors.New("lock lost")
		}
		res.lost = err
	case <-ctx.Done():
	}
	res.stopped = true
	_ = cmd.Process.Signal(syscall.SIGTERM)
	grace := time.NewTimer(spec.grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		res.killed = true
		_ = cmd.Process.Kill()
		<-done
	}
	res.code = exitCode(cmd.ProcessState)
	return res, nil
}

// exitCode is the shell's view of how a process ended: its exit status, or 128+N when signal N
// killed it.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return ExitFailure
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// mergeEnv returns base with the KEY=value entries of extra replacing those of the same key.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	keys := make(map[string]bool, len(extra))
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// stopMessage says how CMD was stopped.
func stopMessage(argv0 string, res childResult, grace time.Duration) string {
	if res.killed {
		return fmt.Sprintf("sent SIGTERM to %s and SIGKILL after %v", argv0, grace)
	}
	return fmt.Sprintf("sent SIGTERM to %s, which exited with code %d", argv0, res.code)
}
