package storepool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults of the pool's negative cache (see WithRetry) and connection wait (see WithConnectWait).
const (
	// DefaultRetryInitial is how long a connection whose attempt failed is not tried again.
	DefaultRetryInitial = time.Second
	// DefaultRetryMax bounds the delay, which doubles with every failed attempt in a row.
	DefaultRetryMax = time.Minute
	// DefaultConnectWait is how long Store waits for a connection attempt.
	DefaultConnectWait = time.Second
)

// ErrBackingOff marks a RetryError: the connection failed and its time to be tried again has not
// come. ErrConnecting: an attempt to connect is under way and Store stopped waiting for it.
var (
	ErrBackingOff = errors.New("storepool: backing off")
	ErrConnecting = errors.New("storepool: still connecting")
)

// RetryError is what Store returns for a connection whose last attempt failed, from that attempt
// until RetryAt: it does not try the connection again before then; and, with Trying set, while
// the next attempt goes on past the connect wait. It is immutable.
type RetryError struct {
	// Target describes the connection, without secrets.
	Target string
	// Failures counts the failed attempts in a row; Since is when the first of them ended.
	Failures int
	Since    time.Time
	// RetryAt is the earliest time Store tries the connection again.
	RetryAt time.Time
	// Err is the last attempt's error.
	Err error
	// Trying, when set, is when the attempt under way began (after RetryAt).
	Trying time.Time
}

// Error says why the connection failed and when it is tried again, in UTC to the second.
func (e *RetryError) Error() string {
	next := "the operator tries again at " + e.RetryAt.UTC().Format(time.RFC3339)
	if !e.Trying.IsZero() {
		next = "the operator is trying again since " + e.Trying.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("%v (%d failed attempt(s) in a row since %s; %s)", e.Err, e.Failures, e.Since.UTC().Format(time.RFC3339), next)
}

// Unwrap returns ErrBackingOff and the last attempt's error.
func (e *RetryError) Unwrap() []error { return []error{ErrBackingOff, e.Err} }

// retryPolicy is the pool's negative cache: the failed connections, by key, and how long each is
// left alone. Its map is guarded by Pool.mu.
type retryPolicy struct {
	initial, max time.Duration
	// jitter picks the delay actually used for a computed delay d (between d/2 and d).
	jitter func(d time.Duration) time.Duration
	failed map[string]*RetryError
}

func newRetryPolicy() retryPolicy {
	return retryPolicy{initial: DefaultRetryInitial, max: DefaultRetryMax, jitter: equalJitter, failed: map[string]*RetryError{}}
}

// equalJitter returns a delay between d/2 and d, so that connections that failed together (locks
// created together) are not all tried again in the same instant.
func equalJitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// blockedLocked returns the RetryError of key k while its time to be tried again has not come.
func (r *retryPolicy) blockedLocked(k string, now time.Time) *RetryError {
	if e := r.failed[k]; e != nil && now.Before(e.RetryAt) {
		return e
	}
	return nil
}

// failLocked records a failed attempt of k that ended at now with err, and returns the RetryError
// for it: the delay starts at initial and doubles with each failure in a row, up to max.
func (r *retryPolicy) failLocked(k, target string, now time.Time, err error) *RetryError {
	e := &RetryError{Target: target, Failures: 1, Since: now, Err: err}
	if prev := r.failed[k]; prev != nil {
		e.Failures, e.Since = prev.Failures+1, prev.Since
	}
	d := r.initial
	for i := 1; i < e.Failures && d < r.max; i++ {
		d *= 2
	}
	e.RetryAt = now.Add(r.jitter(min(d, r.max)))
	r.failed[k] = e
	return e
}

// tryingLocked returns the RetryError of k for an attempt that began at started after it, or nil
// when k has not failed.
func (r *retryPolicy) tryingLocked(k string, started time.Time) *RetryError {
	prev := r.failed[k]
	if prev == nil {
		return nil
	}
	e := *prev
	e.Trying = started
	return &e
}

// succeedLocked forgets the failures of k.
func (r *retryPolicy) succeedLocked(k string) { delete(r.failed, k) }

// sweepLocked forgets failures whose retry time passed longer than max ago: their connections are
// no longer asked for (their locks are gone or changed).
func (r *retryPolicy) sweepLocked(now time.Time) {
	for k, e := range r.failed {
		if now.Sub(e.RetryAt) > r.max {
			delete(r.failed, k)
		}
	}
}
