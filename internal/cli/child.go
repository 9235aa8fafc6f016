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

	"k8s.io/utils/clock"
)

// signalRouter delivers the signals baton receives: to CMD while one runs, else as cancellation
// of the command.
type signalRouter struct {
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	group int // CMD's process group while it runs, else 0
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
	if r.group != 0 {
		if sig, ok := s.(syscall.Signal); ok {
			_ = syscall.Kill(-r.group, sig) // fails only when CMD's group already exited
			return
		}
	}
	r.cancel(&interruptedError{sig: s})
}

func (r *signalRouter) setChild(group int) {
	r.mu.Lock()
	r.group = group
	r.mu.Unlock()
}

// childSpec is the command run holds the lock for.
type childSpec struct {
	argv  []string
	env   []string // added to the process environment, overriding
	grace time.Duration
	// deadline, when set, returns the lease's self-fence deadline on the wall clock, derived at
	// the call from a clock that counts suspended time (lock.Lease.Deadline, knownDeadline.get),
	// so that time.Until of it is the time really left: CMD's whole process group is killed by
	// then, and told to stop termLead before it while no renewal moves it (see deadlineLeads).
	deadline func() time.Time
	termLead time.Duration
	killLead time.Duration
}

// deadlineLeads returns how long before a lease's deadline CMD gets SIGTERM (min(grace, lease/4):
// healthy renewals, every lease/3, keep the deadline further away than that) and SIGKILL (a
// moment before it, for the kill to land).
func deadlineLeads(grace, lease time.Duration) (term, kill time.Duration) {
	return min(grace, lease/4), min(100*time.Millisecond, lease/20)
}

// childResult is how CMD ended.
type childResult struct {
	code     int       // exit code to pass on (128+N when killed by signal N)
	lost     error     // non-nil when CMD was killed because the lock was lost
	stopped  bool      // CMD was told to stop with SIGTERM (lock at risk, or ctx ended)
	killed   bool      // it got SIGKILL (at once after a loss or past the deadline, else after SIGTERM)
	atRisk   bool      // stopped because no renewal came before the lease's deadline drew near
	killedAt time.Time // when the process group got SIGKILL
	deadline time.Time // the lease's deadline then (direct mode)
}

// supervise runs CMD in a process group of its own until it exits (what it left running in the
// group is killed then), the lock is lost (a value on lost, or lost closing) or ctx ends. A lost
// lock kills the group at once: another owner may hold the lock already (the sidecar released it,
// or its record names another), and baton cannot tell. When ctx ends the group gets SIGTERM and,
// if CMD still runs after the grace period, SIGKILL. With spec.deadline the group is also told to
// stop when the lease's deadline draws near without a renewal, and is killed by the deadline
// whatever the grace period: nothing CMD started still runs when another owner could be granted
// the lock. The timers run on p.clock, which counts suspended time, so a deadline that passed
// while the machine was suspended is acted on within a timer step of the resume. Signals baton
// receives meanwhile are forwarded to CMD's group.
func (p *program) supervise(ctx context.Context, spec childSpec, lost <-chan error) (childResult, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdin, p.stdout, p.stderr
	cmd.Env = mergeEnv(os.Environ(), spec.env)
	var restoreTerminal func()
	cmd.SysProcAttr, restoreTerminal = childGroup(p.stdin)
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
	defer restoreTerminal()
	group := cmd.Process.Pid // the group's ID: CMD leads it
	p.signals.setChild(group)
	defer p.signals.setChild(0)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
		close(done)
	}()

	var res childResult
	signalGroup := func(sig syscall.Signal) { _ = syscall.Kill(-group, sig) } // fails only when all of it exited
	killed := func() (childResult, error) {
		res.killed, res.killedAt = true, time.Now()
		signalGroup(syscall.SIGKILL)
		<-done
		res.code = exitCode(cmd.ProcessState)
		return res, nil
	}
	var killAt clock.Timer // the grace period, once CMD was told to stop
	defer func() {
		if killAt != nil {
			killAt.Stop()
		}
	}()
	cancelled := ctx.Done()
	stop := func(grace time.Duration) {
		if res.stopped {
			return
		}
		res.stopped = true
		signalGroup(syscall.SIGTERM)
		killAt = p.clock.NewTimer(grace)
	}
	for {
		// Wake for the deadline's leads, if any: SIGTERM termLead before, SIGKILL killLead before.
		var wake clock.Timer
		if spec.deadline != nil {
			res.deadline = spec.deadline()
			left := time.Until(res.deadline)
			switch {
			case left <= spec.killLead:
				res.atRisk = res.atRisk || !res.stopped
				return killed()
			case left <= spec.termLead:
				res.atRisk = res.atRisk || !res.stopped
				stop(left - spec.killLead)
				wake = p.clock.NewTimer(left - spec.killLead)
			default:
				wake = p.clock.NewTimer(left - spec.termLead)
			}
		}
		var woken, graceOver <-chan time.Time
		if wake != nil {
			woken = wake.C()
		}
		if killAt != nil {
			graceOver = killAt.C()
		}
		select {
		case <-done:
			stopTimer(wake)
			res.code = exitCode(cmd.ProcessState)
			// What CMD left running in its group must not outlive the lock.
			if syscall.Kill(-group, 0) == nil {
				signalGroup(syscall.SIGKILL)
				fmt.Fprintf(p.stderr, "baton: %s exited and left processes in its group; killed them before giving the lock back\n", spec.argv[0])
			}
			return res, nil
		case err, ok := <-lost:
			stopTimer(wake)
			if !ok || err == nil {
				err = errors.New("lock lost")
			}
			res.lost = err
			if spec.deadline != nil {
				res.deadline = spec.deadline()
			}
			return killed()
		case <-cancelled:
			cancelled = nil
			stop(spec.grace)
		case <-graceOver:
			stopTimer(wake)
			return killed()
		case <-woken:
		}
		stopTimer(wake)
	}
}

// stopTimer stops t unless it is nil.
func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
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

// stopMessage says how CMD was stopped, and when (and the lease's deadline, when known).
func stopMessage(argv0 string, res childResult) string {
	deadline := ""
	if !res.deadline.IsZero() {
		deadline = "; the lease's deadline was " + stamp(res.deadline)
	}
	switch {
	case res.killed && res.stopped:
		return fmt.Sprintf("sent SIGTERM to %s's process group and SIGKILL at %s%s", argv0, stamp(res.killedAt), deadline)
	case res.killed:
		return fmt.Sprintf("killed %s's process group at once: SIGKILL at %s%s", argv0, stamp(res.killedAt), deadline)
	}
	return fmt.Sprintf("sent SIGTERM to %s's process group; %s exited with code %d%s", argv0, argv0, res.code, deadline)
}
