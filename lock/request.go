package lock

import (
	"context"
	"fmt"
	"time"
)

// Store requests: every one bounded by the request timeout (docs/design.md, "A hung node"), and a
// write of unknown outcome settled by a linearizable read (rule 5); and the waits between
// requests, spread so that Lockers do not poll in lockstep.

// jitter spreads d by ±10% so that waiters do not poll in lockstep.
func (l *Locker) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return d*9/10 + time.Duration(l.rng.Int64N(int64(d/5)+1))
}

// request runs one store call under the request timeout.
func request[T any](ctx context.Context, l *Locker, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	return f(ctx)
}

// cas runs one conditional write under the request timeout.
func (l *Locker) cas(ctx context.Context, lockID string, prev, next Record) (applied bool, cur Record, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	return l.store.CompareAndSwap(ctx, lockID, prev, next)
}

// load reads the owner record under the request timeout.
func (l *Locker) load(ctx context.Context, lockID string, linearizable bool) (Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.requestTimeout)
	defer cancel()
	return l.store.Load(ctx, lockID, linearizable)
}

// settle resolves a conditional write of unknown outcome with a linearizable read, retrying until
// it succeeds or ctx ends (rule 5). After it returns, the write is visible or never applies.
func (l *Locker) settle(ctx context.Context, lockID string) (Record, bool, error) {
	backoff := l.opts.pollInterval
	for {
		rec, ok, err := l.load(ctx, lockID, true)
		if err == nil {
			return rec, ok, nil
		}
		l.opts.log.V(1).Info("settling a write of unknown outcome", "lock", lockID, "err", err.Error())
		if err := l.sleep(ctx, l.jitter(backoff)); err != nil {
			return Record{}, false, fmt.Errorf("lock %s: settling a write of unknown outcome: %w", lockID, err)
		}
		backoff = min(2*backoff, l.opts.renewInterval)
	}
}

// sleep waits for d or the end of ctx.
func (l *Locker) sleep(ctx context.Context, d time.Duration) error {
	t := l.opts.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
