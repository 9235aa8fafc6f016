// Command go-blocking is the Blocking-mode example: a worker that works only while its pod's
// sidecar holds the lock, and exits at once with status 75 when the pod stops holding it, so that
// the kubelet restarts it and it waits for its next turn. In Blocking mode the sidecar takes the
// lock by itself and, after a loss, queues again by itself; nothing stops the app then (the pod
// only turns not Ready, or is relabelled standby), so the app has to stop itself. This one does
// it by exiting, the simplest way to be sure no work of the old grant goes on.
//
// It subscribes to the sidecar's event stream first, then waits (for ever, until SIGTERM) until
// the sidecar holds the lock with a fencing token, and works with that token. It exits 75 (and
// says why on stderr) on the first of: a lost or released event for its lock, an acquired event
// with another token (events of earlier grants are ignored), the end of the event stream (the sidecar restarted or is shutting down),
// or a state read (every EXAMPLE_CHECK) that does not show the lock held with its token or that
// the sidecar does not answer within EXAMPLE_CHECK. It exits 0 on SIGTERM or SIGINT.
//
// Environment: BATON_SOCKET and BATON_LOCKS (set by the injecting webhook; the first lock is
// used), EXAMPLE_WORK (time one unit of work takes, default 1s) and EXAMPLE_CHECK (default 1s).
// Each unit of work prints one JSON line {"lock":..., "token":..., "unit":...} on stdout.
//
// What it does not do: stop a write already sent. A sidecar that is paused past the lease sends
// no lost event and answers no read: this worker then stops once a read times out, up to
// EXAMPLE_CHECK after the lease ended. Only a fencing token checked by the resource
// (examples/go) turns away a write of an old grant that arrives late.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// exitLost is the exit status when the pod stops holding the lock (EX_TEMPFAIL, as baton run).
const exitLost = 75

// errLost says the pod stopped holding the lock; run returns it wrapped with what showed it.
var errLost = errors.New("go-blocking: the lock is no longer held by this pod")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx)
	switch {
	case errors.Is(err, errLost):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(exitLost) // at once: the work in progress is abandoned with the process
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// config is what the environment says.
type config struct {
	socket, lockID string
	work, check    time.Duration
}

func readConfig() (config, error) {
	c := config{socket: os.Getenv("BATON_SOCKET"), work: time.Second, check: time.Second}
	c.lockID, _, _ = strings.Cut(os.Getenv("BATON_LOCKS"), ",")
	if c.socket == "" || c.lockID == "" {
		return c, errors.New("go-blocking: set BATON_SOCKET and BATON_LOCKS (the webhook sets both in an annotated pod)")
	}
	for name, d := range map[string]*time.Duration{"EXAMPLE_WORK": &c.work, "EXAMPLE_CHECK": &c.check} {
		if v := os.Getenv(name); v != "" {
			parsed, err := time.ParseDuration(v)
			if err != nil || parsed <= 0 {
				return c, fmt.Errorf("go-blocking: %s=%q: want a duration above 0, such as 1s", name, v)
			}
			*d = parsed
		}
	}
	return c, nil
}

// run waits for the lock, then works until the pod stops holding it (errLost) or ctx ends (nil).
func run(ctx context.Context) error {
	cfg, err := readConfig()
	if err != nil {
		return err
	}
	client := sidecarclient.New(cfg.socket)
	// Subscribe first: every event after the state read below is then on the stream.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, _, err := client.Subscribe(sctx)
	if err != nil {
		return fmt.Errorf("go-blocking: subscribing to the sidecar's events: %w", err)
	}
	token, err := waitHeld(ctx, client, events, cfg.lockID)
	if err != nil || token == 0 {
		return err
	}
	lost := make(chan error, 1)
	go watch(sctx, client, events, cfg, token, lost)
	return work(ctx, cfg, token, lost)
}

// waitHeld waits until the sidecar holds lockID and returns the grant's token; 0 when ctx ended.
// It never gives up by itself: in Blocking mode the sidecar queues until it is the pod's turn.
func waitHeld(ctx context.Context, client *sidecarclient.Client, events <-chan sidecarclient.Event, lockID string) (int64, error) {
	st, err := client.Lock(ctx, lockID)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, fmt.Errorf("go-blocking: reading lock %s: %w", lockID, err)
	}
	if st.Granted() {
		return st.Token, nil
	}
	why := string(st.State)
	if st.Reason != "" {
		why += ": " + st.Reason
	}
	fmt.Fprintf(os.Stderr, "go-blocking: waiting for lock %s (%s)\n", lockID, why)
	for {
		select {
		case <-ctx.Done():
			return 0, nil
		case ev, ok := <-events:
			if !ok {
				return 0, fmt.Errorf("%w: the sidecar ended its event stream while this worker waited", errLost)
			}
			if ev.Type == sidecarclient.EventAcquired && ev.LockID == lockID && ev.Token > 0 {
				return ev.Token, nil
			}
		}
	}
}

// watch sends on lost, once, the first sign that the pod no longer holds lockID with token.
func watch(ctx context.Context, client *sidecarclient.Client, events <-chan sidecarclient.Event, cfg config, token int64, lost chan<- error) {
	tick := time.NewTicker(cfg.check)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			switch {
			case !ok:
				lost <- fmt.Errorf("%w: the sidecar ended its event stream (it restarted or is shutting down)", errLost)
				return
			case ev.LockID != cfg.lockID, ev.Token != 0 && ev.Token < token: // another lock, an earlier grant
			case ev.Type == sidecarclient.EventLost, ev.Type == sidecarclient.EventReleased,
				ev.Type == sidecarclient.EventAcquired && ev.Token != token:
				lost <- fmt.Errorf("%w: event %s of lock %s, token %d (%s)", errLost, ev.Type, ev.LockID, ev.Token, ev.Reason)
				return
			}
		case <-tick.C:
			rctx, cancel := context.WithTimeout(ctx, cfg.check)
			st, err := client.Lock(rctx, cfg.lockID)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				lost <- fmt.Errorf("%w: the sidecar did not answer a state read within %v: %v", errLost, cfg.check, err)
				return
			case !st.Granted() || st.Token != token:
				lost <- fmt.Errorf("%w: lock %s is %s with token %d, not held with token %d", errLost, cfg.lockID, st.State, st.Token, token)
				return
			}
		}
	}
}

// work does one unit of work after another with token until lost says stop or ctx ends. A unit
// in progress is not waited for: a real worker passes token to every write it makes, and the
// resource turns away the writes of a grant that ended.
func work(ctx context.Context, cfg config, token int64, lost <-chan error) error {
	out := json.NewEncoder(os.Stdout)
	for unit := 1; ; unit++ {
		select { // a loss seen while the last unit ran stops the next one from starting
		case err := <-lost:
			return err
		default:
		}
		if err := out.Encode(map[string]any{"lock": cfg.lockID, "token": token, "unit": unit}); err != nil {
			return err
		}
		t := time.NewTimer(cfg.work)
		select {
		case err := <-lost:
			t.Stop()
			return err
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
