// Package ctxtime waits on the clock unless a context ends first.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d, or until ctx ends, and returns ctx's error in that case. A d of zero or less
// does not wait.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
