package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-dev/baton/sidecarclient"
)

// yield steps down: the sidecar releases the lock and queues again behind the waiters.
func (p *program) yield(ctx context.Context, args []string) (int, error) {
	fs := newFlagSet("yield")
	socket := fs.String("socket", "", "the sidecar's API socket")
	lockID := fs.String("lock", "", "the lock to yield")
	wait := durationFlag(fs, "wait", 0, "Try mode: how long to wait to get the lock back")
	token := fs.Int64("token", 0, "yield only the grant with this fencing token")
	if _, err := parseFlags(fs, "yield", args, false); err != nil {
		return 0, err
	}
	if *token < 0 {
		return 0, usagef("yield", "--token is %d: give the fencing token of the grant to yield (a positive number), or leave it out", *token)
	}
	path := p.socketPath(*socket)
	if err := checkSocket("yield", path, " (or give --socket / BATON_SOCKET)"); err != nil {
		return 0, err
	}
	c := sidecarclient.New(path)
	id := *lockID
	if id == "" {
		only, code, err := onlyLock(ctx, c, path, "yield", "the one to yield")
		if err != nil {
			return code, err
		}
		id = only
	}
	st, err := c.Yield(ctx, id, *token, *wait)
	var ae *sidecarclient.Error
	switch {
	case err == nil:
	case errors.Is(err, sidecarclient.ErrLocked):
		return ExitTempFail, fmt.Errorf("yielded lock %q; not granted again within --wait %v", id, *wait)
	case errors.Is(err, sidecarclient.ErrAppNotReady), errors.Is(err, sidecarclient.ErrSuperseded):
		return ExitTempFail, fmt.Errorf("yielded lock %q; not taken again by this pod now: %w", id, err)
	case errors.Is(err, sidecarclient.ErrUnknownLock) && errors.As(err, &ae):
		return 0, usagef("yield", "%s", ae.Message)
	case errors.Is(err, sidecarclient.ErrNotHeld):
		return ExitFailure, fmt.Errorf("lock %q is not held by this pod: nothing to yield", id)
	case errors.Is(err, sidecarclient.ErrTokenMismatch):
		return ExitFailure, fmt.Errorf("lock %q is not held with token %d (that grant ended): nothing yielded", id, *token)
	case ctx.Err() != nil:
		return ExitFailure, context.Cause(ctx)
	default:
		return ExitFailure, sidecarError(path, err)
	}
	switch st.State {
	case sidecarclient.StateHeld:
		fmt.Fprintf(p.stdout, "%s token %d\n", id, st.Token)
	default:
		fmt.Fprintf(p.stdout, "%s %s (%s)\n", id, st.State, st.Reason)
	}
	return ExitOK, nil
}
