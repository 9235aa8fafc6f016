package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// wait blocks until the sidecar holds the requested locks.
func (p *program) wait(ctx context.Context, args []string) (int, error) {
	fs := newFlagSet("wait")
	socket := fs.String("socket", "", "the sidecar's API socket")
	var ids []string
	fs.Var(listValue{&ids}, "lock", "lock to wait for (repeatable)")
	timeout := durationFlag(fs, "timeout", DefaultTimeout, "how long to wait")
	if _, err := parseFlags(fs, "wait", args, false); err != nil {
		return 0, err
	}
	path := p.socketPath(*socket)
	if err := checkSocket("wait", path, " (or give --socket / BATON_SOCKET)"); err != nil {
		return 0, err
	}
	c := sidecarclient.New(path)
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	events, _ := c.Events(streamCtx)

	t := newTracker("wait", ids)
	if err := p.waitHeld(ctx, c, &stream{events: events}, t, *timeout); err != nil {
		return ExitFailure, err
	}
	for _, id := range t.ids {
		fmt.Fprintf(p.stdout, "%s token %d\n", id, t.state[id].Token)
	}
	return ExitOK, nil
}

// timeoutError says which locks were not held when the wait ran out.
type timeoutError struct {
	after   time.Duration
	pending string
}

func (e *timeoutError) Error() string {
	if e.after == 0 {
		return "not held: " + e.pending
	}
	return fmt.Sprintf("timed out after %v waiting for %s", e.after, e.pending)
}

// waitHeld waits up to timeout (0: look once) until every lock t tracks is held, following the
// event stream and re-reading the state every p.poll in case an event was missed (events sent
// before the stream was subscribed are not replayed). When the stream ends, st.events becomes nil
// and only the re-reads are left.
func (p *program) waitHeld(ctx context.Context, c *sidecarclient.Client, st *stream, t *tracker, timeout time.Duration) error {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	expired := func() error {
		return &timeoutError{after: timeout, pending: t.pending()}
	}
	read := func() error {
		ls, err := c.Locks(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if wctx.Err() != nil {
				return expired()
			}
			return sidecarError("", err)
		}
		return t.snapshot(ls)
	}
	if err := read(); err != nil {
		return err
	}
	if timeout == 0 {
		if !t.held() {
			return expired()
		}
		return nil
	}
	tick := time.NewTicker(p.poll)
	defer tick.Stop()
	for !t.held() {
		select {
		case ev, ok := <-st.events:
			if !ok {
				st.events = nil // the sidecar ended the stream; keep re-reading
				continue
			}
			t.apply(ev)
		case <-tick.C:
			if err := read(); err != nil {
				return err
			}
		case <-wctx.Done():
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return expired()
		}
	}
	return nil
}

// tracker follows the state of the locks a command waits for.
type tracker struct {
	cmd   string
	ids   []string // the locks, in declaration order once known
	all   bool     // every declared lock
	state map[string]sidecarclient.LockStatus
}

func newTracker(cmd string, ids []string) *tracker {
	return &tracker{cmd: cmd, ids: ids, all: len(ids) == 0, state: map[string]sidecarclient.LockStatus{}}
}

// snapshot replaces the state with the sidecar's answer. A lock the sidecar does not declare is a
// usage error.
func (t *tracker) snapshot(ls []sidecarclient.LockStatus) error {
	declared := make(map[string]sidecarclient.LockStatus, len(ls))
	var names []string
	for _, l := range ls {
		declared[l.LockID] = l
		names = append(names, l.LockID)
	}
	if t.all {
		if len(ls) == 0 {
			return errors.New("the sidecar declares no locks; check the lock IDs of the pod's DistributedLock")
		}
		t.ids = names
	}
	for _, id := range t.ids {
		l, ok := declared[id]
		if !ok {
			return usagef(t.cmd, "lock %q is not declared for this pod (declared: %s); check --lock", id, strings.Join(names, ", "))
		}
		t.state[id] = l
	}
	return nil
}

// apply updates the state with one event.
func (t *tracker) apply(ev sidecarclient.Event) {
	l, ok := t.state[ev.LockID]
	if !ok {
		return
	}
	switch ev.Type {
	case sidecarclient.EventAcquired:
		l.State, l.Token, l.Reason, l.QueuePosition = sidecarclient.StateHeld, ev.Token, "", 0
	case sidecarclient.EventLost:
		l.State, l.Token, l.Reason = sidecarclient.StateLost, ev.Token, ev.Reason
	case sidecarclient.EventReleased:
		l.State, l.Reason = sidecarclient.StateIdle, ev.Reason
	default:
		return
	}
	t.state[ev.LockID] = l
}

func (t *tracker) held() bool {
	for _, id := range t.ids {
		if t.state[id].State != sidecarclient.StateHeld {
			return false
		}
	}
	return true
}

// pending describes the locks that are not held, e.g. `orders (waiting, position 2, held by
// shop/orders-1)`.
func (t *tracker) pending() string {
	var out []string
	for _, id := range t.ids {
		l := t.state[id]
		if l.State == sidecarclient.StateHeld {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s)", id, describe(l)))
	}
	return strings.Join(out, ", ")
}

// describe renders a lock's state for messages.
func describe(l sidecarclient.LockStatus) string {
	if l.State == "" {
		return "state unknown"
	}
	parts := []string{string(l.State)}
	if l.QueuePosition > 0 {
		parts = append(parts, fmt.Sprintf("position %d", l.QueuePosition))
	}
	if l.Holder != "" {
		parts = append(parts, "held by "+l.Holder)
	}
	if l.State == sidecarclient.StateIdle {
		parts = append(parts, "Try mode: acquire it with baton run or the API")
	}
	if l.Reason != "" {
		parts = append(parts, l.Reason)
	}
	return strings.Join(parts, ", ")
}
