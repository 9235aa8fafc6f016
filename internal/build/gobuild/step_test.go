package gobuild

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// stepRun is a Step running on a fake clock: the test moves the clock and reads each line the
// step prints, in order, with a deadline.
type stepRun struct {
	t       *testing.T
	clock   *clocktesting.FakeClock
	lines   chan string
	started chan int // attempt numbers, as each attempt starts
	result  chan error
}

// syncLines is a progress writer that hands every write to the test, blocking until it is taken,
// so that the order of lines and clock moves is the test's.
type syncLines chan string

func (l syncLines) Write(p []byte) (int, error) {
	l <- string(p)
	return len(p), nil
}

// startStep runs s on a fake clock with attempt, which is told its number.
func startStep(t *testing.T, s Step, attempt func(ctx context.Context, n int) error) *stepRun {
	t.Helper()
	r := &stepRun{t: t, clock: clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)),
		lines: make(chan string), started: make(chan int, 10), result: make(chan error, 1)}
	s.Prefix, s.Progress, s.Clock = "localkube", syncLines(r.lines), r.clock
	n := 0
	go func() {
		r.result <- s.Run(t.Context(), func(ctx context.Context) error {
			n++
			r.started <- n
			return attempt(ctx, n)
		})
	}()
	return r
}

const deadline = 10 * time.Second // only for a broken step: every wait below is for an event

// line returns the next line and checks that it starts with prefix.
func (r *stepRun) line(prefix string) string {
	r.t.Helper()
	select {
	case l := <-r.lines:
		if !strings.HasPrefix(l, prefix) {
			r.t.Fatalf("line %q, want one starting with %q", l, prefix)
		}
		return l
	case err := <-r.result:
		r.t.Fatalf("the step ended (%v) before printing a line starting with %q", err, prefix)
	case <-time.After(deadline):
		r.t.Fatalf("no line starting with %q within %s", prefix, deadline)
	}
	return ""
}

// attemptStarted waits for attempt n to start.
func (r *stepRun) attemptStarted(n int) {
	r.t.Helper()
	select {
	case got := <-r.started:
		if got != n {
			r.t.Fatalf("attempt %d started, want %d", got, n)
		}
	case <-time.After(deadline):
		r.t.Fatalf("attempt %d did not start within %s", n, deadline)
	}
}

// end returns the step's error once it returned, with no line left unread.
func (r *stepRun) end() error {
	r.t.Helper()
	select {
	case err := <-r.result:
		return err
	case l := <-r.lines:
		r.t.Fatalf("unexpected line %q", l)
	case <-time.After(deadline):
		r.t.Fatalf("the step did not return within %s", deadline)
	}
	return nil
}

func TestStepHeartbeatWhileSilent(t *testing.T) {
	release := make(chan struct{})
	r := startStep(t, Step{What: "resolving k8s.io/kubernetes@v1.37.1's modules", Expect: "minutes with an empty module cache",
		Timeout: 15 * time.Minute}, func(ctx context.Context, n int) error {
		<-release
		return nil
	})
	first := r.line("localkube: resolving k8s.io/kubernetes@v1.37.1's modules (minutes with an empty module cache; a line each minute")
	if !strings.Contains(first, "given up after 15m and tried again, 3 attempts in all") {
		t.Errorf("the first line does not announce the bound: %q", first)
	}
	r.attemptStarted(1) // its ticker and timer are set
	for i := 1; i <= 3; i++ {
		r.clock.Step(time.Minute)
		l := r.line("localkube: still resolving k8s.io/kubernetes@v1.37.1's modules (")
		if want := (time.Duration(i) * time.Minute).String() + " so far)"; !strings.Contains(l, want) {
			t.Errorf("heartbeat %d is %q, want %q in it", i, l, want)
		}
	}
	close(release)
	r.line("localkube: resolving k8s.io/kubernetes@v1.37.1's modules done in 3m0s")
	if err := r.end(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestStepTimeoutThenRetry(t *testing.T) {
	r := startStep(t, Step{What: "fetching Cassandra", Timeout: 10 * time.Minute, Every: time.Hour, Backoff: 10 * time.Second},
		func(ctx context.Context, n int) error {
			if n == 1 {
				<-ctx.Done() // a stalled download, ended by the timeout
				return ctx.Err()
			}
			return nil
		})
	r.line("localkube: fetching Cassandra (")
	r.attemptStarted(1)
	r.clock.Step(10*time.Minute - time.Nanosecond)
	select {
	case l := <-r.lines:
		t.Fatalf("line %q before the timeout", l)
	default:
	}
	r.clock.Step(time.Nanosecond)
	r.line("localkube: fetching Cassandra: attempt 1 of 3 failed: no result within 10m; trying again in 10s")
	r.clock.Step(10 * time.Second) // the pause's timer is set before the line
	r.attemptStarted(2)
	r.line("localkube: fetching Cassandra done in 10m10s")
	if err := r.end(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestStepGivesUp(t *testing.T) {
	refused := errors.New("go mod download failed:\ndial tcp: connection refused")
	r := startStep(t, Step{What: "resolving helm v3.22.0's modules", Timeout: time.Minute, Attempts: 3, Backoff: 5 * time.Second,
		Hint: "check that go env GOPROXY can be reached"}, func(ctx context.Context, n int) error {
		return refused
	})
	r.line("localkube: resolving helm")
	r.attemptStarted(1)
	// An attempt's line has the first line of its error; the error returned has all of it.
	r.line("localkube: resolving helm v3.22.0's modules: attempt 1 of 3 failed: go mod download failed (...); trying again in 5s\n")
	r.clock.Step(5 * time.Second)
	r.attemptStarted(2)
	r.line("localkube: resolving helm v3.22.0's modules: attempt 2 of 3 failed: go mod download failed (...); trying again in 10s\n")
	r.clock.Step(10 * time.Second)
	r.attemptStarted(3)
	err := r.end()
	if !errors.Is(err, refused) {
		t.Fatalf("Run = %v, want it to wrap the last attempt's error", err)
	}
	want := "resolving helm v3.22.0's modules: gave up after 3 attempts in 15s; check that go env GOPROXY can be reached: " +
		"go mod download failed:\ndial tcp: connection refused"
	if err.Error() != want {
		t.Errorf("Run = %q\nwant  %q", err, want)
	}
}

func TestStepTimeoutErrorOnLastAttempt(t *testing.T) {
	r := startStep(t, Step{What: "installing runc", Timeout: time.Minute, Attempts: 1, Every: time.Hour},
		func(ctx context.Context, n int) error {
			<-ctx.Done()
			return ctx.Err()
		})
	r.line("localkube: installing runc (")
	r.attemptStarted(1)
	r.clock.Step(time.Minute)
	err := r.end()
	var te *TimeoutError
	if !errors.As(err, &te) || te.After != time.Minute {
		t.Fatalf("Run = %v, want a *TimeoutError after 1m", err)
	}
	if want := "installing runc: gave up after 1 attempt in 1m0s: no result within 1m"; err.Error() != want {
		t.Errorf("Run = %q\nwant  %q", err, want)
	}
}

func TestStepStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	clock := clocktesting.NewFakeClock(time.Now())
	started := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- Step{What: "fetching", Timeout: time.Minute, Clock: clock}.Run(ctx, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return errors.New("mvn: signal: killed") // what a killed command says: not ctx's error
		})
	}()
	<-started
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(deadline):
		t.Fatal("Run did not return after its context was cancelled (or it retried)")
	}
}

func TestStepNeedsATimeout(t *testing.T) {
	if err := (Step{What: "x"}).Run(t.Context(), func(context.Context) error { return nil }); err == nil {
		t.Fatal("Run without a timeout succeeded")
	}
}
