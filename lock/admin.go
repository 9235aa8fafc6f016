package lock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Bounds of Revoke's pause between attempts.
const (
	revokeBackoff    = 50 * time.Millisecond
	maxRevokeBackoff = 2 * time.Second
)

// Status is a snapshot of one lock for display: its owner record and its queue.
type Status struct {
	LockID string
	// Exists is false when the lock was never granted.
	Exists bool
	Record Record
	// Queue holds the live waiters in queue order. The holder is not in it.
	Queue []QueueEntry
}

// Inspect reads a lock's owner record and queue. The snapshot may be stale by the time it returns;
// never base a grant on it.
func Inspect(ctx context.Context, store Store, lockID string) (Status, error) {
	if err := ValidateLockID(lockID); err != nil {
		return Status{}, err
	}
	rec, ok, err := store.Load(ctx, lockID, false)
	if err != nil {
		return Status{}, fmt.Errorf("lock %s: reading owner record: %w", lockID, err)
	}
	queue, err := store.Queue(ctx, lockID, 0, queueReadLimit)
	if err != nil {
		return Status{}, fmt.Errorf("lock %s: reading queue: %w", lockID, err)
	}
	return Status{LockID: lockID, Exists: ok, Record: rec, Queue: queue}, nil
}

// Revoke forces out the holder of token (rule 8). It marks the grant revoked with a
// conditional write that applies only while token is the current grant, so it can never hit a
// later holder. The revoked holder learns it at its next renewal and fences itself; the next waiter
// is granted once the revoked record was seen unchanged for a full lease, so grants still never
// overlap. Revoke returns ErrNotHolder when token is not the current grant, and nil when it was
// already revoked.
func Revoke(ctx context.Context, store Store, lockID string, token int64) error {
	if err := ValidateLockID(lockID); err != nil {
		return err
	}
	backoff := revokeBackoff
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			// The last attempt did not apply (the holder renewed meanwhile) or its outcome is
			// unknown (an overloaded or unreachable store): do not hammer the store.
			t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("lock %s: revoking token %d: %w", lockID, token, ctx.Err())
			case <-t.C:
			}
			backoff = min(2*backoff, maxRevokeBackoff)
		}
		// A linearizable read also settles our previous attempt if its outcome was unknown.
		rec, ok, err := store.Load(ctx, lockID, true)
		if err != nil {
			return fmt.Errorf("lock %s: reading owner record to revoke token %d: %w", lockID, token, err)
		}
		switch {
		case !ok || rec.Token != token || !rec.Held():
			return fmt.Errorf("%w: lock %s has token %d (owner %q), not %d", ErrNotHolder, lockID, rec.Token, rec.Owner, token)
		case rec.Revoked:
			return nil
		}
		next := rec
		next.Version++
		next.Revoked = true
		applied, _, _, err := store.CompareAndSwap(ctx, lockID, rec, next)
		if err == nil && applied {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("lock %s: revoking token %d: %w", lockID, token, ctx.Err())
		}
		// Not applied or unknown: read again (settling it) and retry after a pause.
	}
}
