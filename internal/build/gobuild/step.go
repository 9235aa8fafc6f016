package gobuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// Step is an install step that waits on the network (go mod download, mvn fetching from Maven
// Central, apt-get) and prints nothing of its own while it does. [Step.Run] says when it starts,
// prints a line every Every while it runs, gives an attempt up after Timeout, and tries again
// after a pause, up to Attempts times, so that a stalled download ends in a clear error rather
// than silence.
//
// What it does not guarantee: that a retry helps (a wrong version or a missing proxy fails each
// attempt alike), or that an attempt stops at once when given up: Run cancels the attempt's
// context and waits for the attempt to return, so an attempt must honour its context (a command
// run with exec.CommandContext and a WaitDelay does).
type Step struct {
	// Prefix starts every line and error, e.g. "localkube".
	Prefix string
	// What names the step in the lines, e.g. "resolving helm v3.22.0's modules".
	What string
	// Expect says how long the step takes, for the first line, e.g. "about a minute with an
	// empty module cache". Optional.
	Expect string
	// Hint ends the error of a step given up, telling the user what to check.
	Hint string
	// Progress receives the lines. Default: discarded.
	Progress io.Writer
	// Timeout bounds one attempt; required.
	Timeout time.Duration
	// Attempts is how many times the step is tried. Default 3.
	Attempts int
	// Backoff is the pause before the second attempt; each later pause doubles. Default 10 s.
	Backoff time.Duration
	// Every is how often a running attempt prints a line. Default HeartbeatEvery.
	Every time.Duration
	// Clock times the step. Default: the real clock.
	Clock clock.WithTicker
}

// TimeoutError is the error of an attempt given up after Step.Timeout.
type TimeoutError struct {
	// After is the step's timeout.
	After time.Duration
}

func (e *TimeoutError) Error() string { return "no result within " + human(e.After) }

// Run runs attempt until it succeeds, the attempts are used up, or ctx ends, with the lines and
// timeouts described at Step. Each attempt gets a context that ends at its timeout. The error of
// a step given up wraps the last attempt's error (a *TimeoutError for one that timed out); a
// step stopped by ctx returns an error wrapping ctx's. Errors start with What, not Prefix: the
// caller adds its own package's prefix. The line of a failed attempt that is tried again has the
// first line of its error only; the error Run returns has all of it.
func (s Step) Run(ctx context.Context, attempt func(ctx context.Context) error) error {
	s = s.withDefaults()
	if s.Timeout <= 0 {
		return fmt.Errorf("%s: gobuild.Step needs a timeout", s.What)
	}
	start := s.Clock.Now()
	expect := ""
	if s.Expect != "" {
		expect = s.Expect + "; "
	}
	every := human(s.Every)
	if s.Every == time.Minute {
		every = "minute"
	}
	fmt.Fprintf(s.Progress, "%s: %s (%sa line each %s while it runs; given up after %s and tried again, %s in all)...\n",
		s.Prefix, s.What, expect, every, human(s.Timeout), attempts(s.Attempts))
	var err error
	for i := 1; i <= s.Attempts; i++ {
		if err = s.try(ctx, i, start, attempt); err == nil {
			fmt.Fprintf(s.Progress, "%s: %s done in %s\n", s.Prefix, s.What, round(s.Clock.Since(start)))
			return nil
		}
		if ctx.Err() != nil {
			if errors.Is(err, ctx.Err()) {
				return fmt.Errorf("%s: %w", s.What, err)
			}
			return fmt.Errorf("%s: %w: %w", s.What, ctx.Err(), err)
		}
		if i == s.Attempts {
			break
		}
		pause := s.Backoff << (i - 1)
		again := s.Clock.After(pause) // before the line: a test that reads it may move the clock
		fmt.Fprintf(s.Progress, "%s: %s: attempt %d of %d failed: %s; trying again in %s\n",
			s.Prefix, s.What, i, s.Attempts, firstLine(err), human(pause))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (after attempt %d failed: %w)", s.What, ctx.Err(), i, err)
		case <-again:
		}
	}
	hint := ""
	if s.Hint != "" {
		hint = "; " + s.Hint
	}
	return fmt.Errorf("%s: gave up after %s in %s%s: %w", s.What, attempts(s.Attempts),
		round(s.Clock.Since(start)), hint, err)
}

// try runs attempt number i with its timeout and the lines each Every.
func (s Step) try(ctx context.Context, i int, start time.Time, attempt func(ctx context.Context) error) error {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timeout := s.Clock.NewTimer(s.Timeout)
	defer timeout.Stop()
	tick := s.Clock.NewTicker(s.Every)
	defer tick.Stop()
	of := ""
	if i > 1 {
		of = fmt.Sprintf(", attempt %d of %d", i, s.Attempts)
	}
	done := make(chan error, 1)
	go func() { done <- attempt(actx) }()
	for {
		select {
		case err := <-done:
			var te *TimeoutError
			if cause := context.Cause(actx); err != nil && errors.As(cause, &te) {
				return cause // the attempt's own error only says it was cancelled
			}
			return err
		case <-timeout.C():
			cancel(&TimeoutError{After: s.Timeout})
		case <-tick.C():
			fmt.Fprintf(s.Progress, "%s: still %s (%s so far%s)\n", s.Prefix, s.What, round(s.Clock.Since(start)), of)
		}
	}
}

func (s Step) withDefaults() Step {
	if s.Progress == nil {
		s.Progress = io.Discard
	}
	if s.Attempts <= 0 {
		s.Attempts = 3
	}
	if s.Backoff <= 0 {
		s.Backoff = 10 * time.Second
	}
	if s.Every <= 0 {
		s.Every = HeartbeatEvery
	}
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	return s
}

// human writes a setting for the lines: "15m", "10s".
func human(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 && d < time.Hour {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return round(d).String()
}

// firstLine returns the first line of err's message, with "(...)" if there are more.
func firstLine(err error) string {
	msg := err.Error()
	if first, _, more := strings.Cut(msg, "\n"); more {
		return strings.TrimSuffix(first, ":") + " (...)"
	}
	return msg
}

// attempts writes "1 attempt", "3 attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// round rounds d to the second for the lines, or to the millisecond under a second (tests).
func round(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}
