package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/baton-dev/baton/internal/cassandraflags"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/sidecarclient"
)

// runOptions are the settings of baton run.
type runOptions struct {
	argv   []string
	lockID string
	wait   time.Duration
	grace  time.Duration

	socket string // sidecar mode

	cassandra    cassandrastore.Connection // direct mode, when it has contact points
	lease        time.Duration
	createSchema bool
	verbose      bool
	hintAddr     string // IP:port to receive hand-off hints on ("" = poll only)
	// hintLoopback lets hints use loopback addresses: development setups only.
	hintLoopback bool
}

// directOnly are the flags of run that make sense only without a sidecar, besides
// --cassandra-hosts, which selects that mode.
var directOnly = func() []string {
	flags := []string{"lease", "create-schema", "verbose", "hint-addr", "hint-allow-loopback"}
	for _, s := range sidecarcontract.CassandraSettings() {
		if s != sidecarcontract.CassandraHosts {
			flags = append(flags, s.Flag())
			if old := s.OldFlag(); old != "" {
				flags = append(flags, old)
			}
		}
	}
	return flags
}()

// run holds a lock while a command runs, through the sidecar or directly in Cassandra: it reads
// the flags, then takes the path --cassandra-hosts chooses.
func (p *program) run(ctx context.Context, args []string) (int, error) {
	o, direct, err := p.runFlags(args)
	if err != nil {
		return 0, err
	}
	if direct {
		return p.runDirect(ctx, o)
	}
	return p.runSidecar(ctx, o)
}

// runFlags reads and checks the flags of run. direct says whether --cassandra-hosts (or its
// variable) chose direct mode; the checks of that mode's flags are in directFlags, those of
// sidecar mode in sidecarFlags. It does not contact the sidecar or Cassandra.
func (p *program) runFlags(args []string) (o runOptions, direct bool, err error) {
	fs := newFlagSet("run")
	socket := fs.String("socket", "", "the sidecar's API socket")
	lockID := fs.String("lock", "", "the lock to hold")
	wait := durationFlag(fs, "wait", DefaultWait, "how long to wait for the lock")
	grace := durationFlag(fs, "grace", DefaultGrace, "time between SIGTERM and SIGKILL")
	cassandra := sidecarcontract.Register(fs, p.env, sidecarcontract.CassandraSettings()...)
	lease := durationFlag(fs, "lease", lock.DefaultLease, "lease duration")
	createSchema := fs.Bool("create-schema", false, "create baton's keyspace and tables first")
	verbose := fs.Bool("verbose", false, "log the lock's progress")
	hintAddr := fs.String("hint-addr", "", "IP:port where other baton processes and sidecars reach this one with hand-off hints")
	hintLoopback := fs.Bool("hint-allow-loopback", false, "development only: hints on loopback addresses")
	argv, err := parseFlags(fs, "run", args, true)
	if err != nil {
		return o, false, err
	}
	if len(argv) == 0 {
		return o, false, usagef("run", "no command to run: write baton run [flags] -- CMD [ARGS...]")
	}
	o = runOptions{argv: argv, lockID: strings.TrimSpace(*lockID), wait: *wait, grace: *grace,
		socket: *socket, lease: *lease, createSchema: *createSchema, verbose: *verbose, hintAddr: strings.TrimSpace(*hintAddr),
		hintLoopback: *hintLoopback}
	if o.lockID != "" {
		if err := lock.ValidateLockID(o.lockID); err != nil {
			return o, false, usagef("run", "--lock %q: %v: give 1 to %d printable characters without spaces", o.lockID, err, lock.MaxIDLength)
		}
	}
	if cassandra.Get(sidecarcontract.CassandraHosts) != "" {
		return o, true, directFlags(fs, &o, cassandra)
	}
	return o, false, p.sidecarFlags(fs, &o)
}

// directFlags checks the flags of direct mode and fills o's Cassandra connection: --lock is
// required, --wait defaults to 0, and the lease and the hint address must be usable.
func directFlags(fs *flag.FlagSet, o *runOptions, cassandra *sidecarcontract.Values) error {
	if o.lockID == "" {
		return usagef("run", "--lock is required with --cassandra-hosts: name the lock to hold, e.g. --lock nightly-report")
	}
	if !flagSet(fs, "wait") {
		o.wait = 0
	}
	var errs []error
	if o.cassandra, errs = cassandraflags.Read(cassandra); len(errs) > 0 {
		return usagef("run", "%s", problems(errs))
	}
	if o.lease < lock.MinLease || o.lease > lock.MaxLease {
		return usagef("run", "--lease is %v: give a duration from %v to %v", o.lease, lock.MinLease, lock.MaxLease)
	}
	if o.hintAddr != "" {
		ap, err := netip.ParseAddrPort(o.hintAddr)
		if err != nil || ap.Addr().IsUnspecified() || ap.Port() == 0 {
			return usagef("run", "--hint-addr %q: give an IP address other processes reach this one at and a port, e.g. 198.18.0.7:9465", o.hintAddr)
		}
		if ap.Addr().IsLoopback() && !o.hintLoopback {
			return usagef("run", "--hint-addr %q is a loopback address, which only this host reaches: give one other hosts reach; several processes on one host (development) add --hint-allow-loopback", o.hintAddr)
		}
	}
	return nil
}

// sidecarFlags checks the flags of sidecar mode: none of direct mode's, and a socket that exists.
// It resolves o.socket (the flag, else the variable, else the default).
func (p *program) sidecarFlags(fs *flag.FlagSet, o *runOptions) error {
	for _, f := range directOnly {
		if flagSet(fs, f) {
			return usagef("run", "--%s applies only without a sidecar: give %s too, or drop --%s", f, sidecarcontract.CassandraHosts, f)
		}
	}
	o.socket = p.socketPath(o.socket)
	return checkSocket("run", o.socket, " For use outside Kubernetes give "+sidecarcontract.CassandraHosts.String()+".")
}

// problems formats settings problems for a usage error: one on its line, several under a heading.
func problems(errs []error) string {
	if len(errs) == 1 {
		return errs[0].Error()
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return "invalid Cassandra settings:\n  " + strings.Join(msgs, "\n  ")
}

// runSidecar runs CMD under a lock the pod's sidecar holds: it subscribes to the sidecar's
// events, picks the lock, gets it (acquireThroughSidecar), runs CMD while watching for its loss
// (superviseThroughSidecar) and gives it back.
func (p *program) runSidecar(ctx context.Context, o runOptions) (int, error) {
	c := sidecarclient.New(o.socket)
	// Subscribe before acquiring or reading the state, so that a loss right after it is seen:
	// Subscribe returns once the sidecar took the subscription.
	streamCtx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	events, _, err := c.Subscribe(streamCtx)
	if err != nil {
		return ExitFailure, sidecarError(o.socket, err)
	}
	st := &stream{events: events}

	id := o.lockID
	if id == "" {
		only, code, err := onlyLock(ctx, c, o.socket, "run", "the one CMD needs")
		if err != nil {
			return code, err
		}
		id = only
	}

	// 1. Get the lock.
	status, acquired, code, err := p.acquireThroughSidecar(ctx, c, st, o, id)
	if err != nil {
		return code, err
	}
	release := func() {
		if acquired {
			p.releaseThroughSidecar(ctx, c, id, status.Token)
		}
	}
	if st.events == nil {
		release()
		return ExitTempFail, fmt.Errorf("the sidecar ended its event stream before %s started (is it shutting down?); lock %q not used", o.argv[0], id)
	}

	// 2. Run CMD, watching for the loss of the lock.
	res, err := p.superviseThroughSidecar(ctx, c, st, o, id, status)
	if err != nil {
		release()
		return res.code, err
	}
	switch {
	case res.lost != nil:
		return ExitTempFail, fmt.Errorf("lost lock %q (token %d) while %s ran: %v; %s", id, status.Token,
			o.argv[0], res.lost, stopMessage(o.argv[0], res))
	case res.atRisk:
		release()
		return ExitTempFail, fmt.Errorf("the sidecar reported no renewal of lock %q (token %d) while its deadline drew near (is it paused, is Cassandra unreachable, or was the machine suspended?), so %s was stopped: %s",
			id, status.Token, o.argv[0], stopMessage(o.argv[0], res))
	}
	// 3. Give the lock back (Try mode) and pass CMD's exit code on.
	release()
	if res.stopped && ctx.Err() != nil {
		return res.code, context.Cause(ctx)
	}
	return res.code, nil
}

// acquireThroughSidecar gets lock id through the sidecar. In Try mode it asks the sidecar for the
// lock; only an answer that grants it (state held, a token) counts, and acquired is then true (run
// must give it back). Blocking mode answers ErrNotTryMode: the sidecar acquires by itself, so it
// waits up to o.wait until the sidecar holds the lock, and acquired stays false. Any other answer
// is an error, with the exit code in code.
func (p *program) acquireThroughSidecar(ctx context.Context, c *sidecarclient.Client, st *stream, o runOptions,
	id string) (status sidecarclient.LockStatus, acquired bool, code int, err error) {
	status, err = acquireWithin(ctx, c, id, o.wait)
	var ae *sidecarclient.Error
	switch {
	case err == nil && status.Granted():
		return status, true, 0, nil
	case err == nil:
		return status, false, ExitTempFail, fmt.Errorf("lock %q not granted: the sidecar answered %s; not running %s", id, describe(status), o.argv[0])
	case errors.Is(err, sidecarclient.ErrAcquiring):
		return status, false, ExitTempFail, fmt.Errorf("lock %q not granted: another acquisition of it is in progress in this pod (another process asked first); not running %s (retry later): %w",
			id, o.argv[0], err)
	case errors.Is(err, sidecarclient.ErrHeldByPod):
		return status, false, ExitTempFail, fmt.Errorf("lock %q not granted: this pod holds it for another process; not running %s (retry once that one released it)",
			id, o.argv[0])
	case errors.Is(err, sidecarclient.ErrNotTryMode):
		t := newTracker("run", []string{id})
		err := p.waitHeld(ctx, c, st, t, o.wait)
		var te *timeoutError
		switch {
		case errors.As(err, &te):
			return status, false, ExitTempFail, fmt.Errorf("lock %q is not held by this pod after --wait %v: %s", id, o.wait, te.pending)
		case err != nil:
			return status, false, ExitFailure, err
		}
		status = t.state[id]
		if !status.Granted() {
			return status, false, ExitFailure, fmt.Errorf("lock %q: the sidecar reports %s, with no fencing token; not running %s", id, describe(status), o.argv[0])
		}
		return status, false, 0, nil
	case errors.Is(err, sidecarclient.ErrLocked):
		holder := "another pod"
		if errors.As(err, &ae) && ae.Lock != nil && ae.Lock.Holder != "" {
			holder = ae.Lock.Holder
		}
		return status, false, ExitTempFail, fmt.Errorf("lock %q held by %s; not running %s (retry later or give a longer --wait)", id, holder, o.argv[0])
	case errors.Is(err, sidecarclient.ErrAppNotReady), errors.Is(err, sidecarclient.ErrSuperseded):
		return status, false, ExitTempFail, fmt.Errorf("lock %q is not taken by this pod now; not running %s: %w", id, o.argv[0], err)
	case errors.Is(err, sidecarclient.ErrUnknownLock) && errors.As(err, &ae):
		return status, false, 0, usagef("run", "%s", ae.Message)
	case ctx.Err() != nil:
		return status, false, ExitFailure, context.Cause(ctx)
	default:
		return status, false, ExitFailure, sidecarError(o.socket, err)
	}
}

// acquireWithin asks the sidecar for lock id, waiting up to wait in all. The sidecar takes at
// most sidecarclient.MaxWait (10m) per request, so a longer wait asks again each time one
// ends with the lock taken (ErrLocked), until wait is used up. Each new request queues at the
// back: a Try-mode wait longer than 10m does not keep its place in the queue. In Blocking mode
// the first answer is ErrNotTryMode, whatever the wait.
func acquireWithin(ctx context.Context, c *sidecarclient.Client, id string, wait time.Duration) (sidecarclient.LockStatus, error) {
	deadline := time.Now().Add(wait)
	for {
		ask := min(wait, sidecarclient.MaxWait)
		status, err := c.Acquire(ctx, id, ask)
		if wait = time.Until(deadline); ask == 0 || wait <= 0 || !errors.Is(err, sidecarclient.ErrLocked) {
			return status, err
		}
	}
}

// releaseThroughSidecar gives back the grant of lock id with token, waiting at most 10 s. Only
// this run's grant: one that ended (and perhaps went to another process of the pod since) is not
// released. A failure is reported on stderr only: the sidecar frees the lock when its lease ends.
func (p *program) releaseThroughSidecar(ctx context.Context, c *sidecarclient.Client, id string, token int64) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := c.Release(rctx, id, token)
	if err != nil && !errors.Is(err, sidecarclient.ErrNotHeld) && !errors.Is(err, sidecarclient.ErrTokenMismatch) {
		fmt.Fprintf(p.stderr, "baton: releasing lock %q: %v (the sidecar frees it when its lease ends)\n", id, err)
	}
}

// superviseThroughSidecar runs CMD while watching lock id, held with status.Token, for its loss.
// The lease's deadline, as the sidecar reports it, bounds CMD as in direct mode, on the same
// suspend-aware clock: its group is told to stop when no renewal moves the deadline away, and
// killed by it, also when the sidecar stops answering (paused, or gone) or the machine was
// suspended past it. A loss kills the group at once, whatever --grace says.
func (p *program) superviseThroughSidecar(ctx context.Context, c *sidecarclient.Client, st *stream, o runOptions, id string,
	status sidecarclient.LockStatus) (childResult, error) {
	spec := childSpec{argv: o.argv, grace: o.grace, env: childEnv(id, status.Token)}
	watch := sidecarWatch{id: id, token: status.Token, every: p.poll}
	if status.LeaseMs > 0 {
		lease := time.Duration(status.LeaseMs) * time.Millisecond
		watch.deadline = &knownDeadline{clock: p.clock}
		sent := p.clock.Now()
		if l, err := c.Lock(ctx, id); err == nil {
			watch.deadline.observe(sent, l, status.Token)
		}
		if !watch.deadline.get().IsZero() {
			spec.deadline = watch.deadline.get
			spec.termLead, spec.killLead = deadlineLeads(o.grace, lease)
			// Renewals come every lease/3; reading the state every lease/8 sees each in time.
			watch.every = min(p.poll, lease/8)
		}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	lost := make(chan error, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		p.watchSidecar(watchCtx, c, st.events, watch, lost)
	}()
	res, err := p.supervise(ctx, spec, lost)
	stopWatch()
	<-watched
	return res, err
}

// stream is the sidecar's event stream; events is nil once it ended.
type stream struct{ events <-chan sidecarclient.Event }

// sidecarWatch is what watchSidecar follows: lock id held with token, read every every, and the
// lease's deadline as the sidecar reports it (nil when the sidecar does not report one).
type sidecarWatch struct {
	id       string
	token    int64
	every    time.Duration
	deadline *knownDeadline
}

// knownDeadline is a grant's self-fence deadline as the sidecar last reported it: the send time of
// a state read plus the time the sidecar said was left, so never later than the sidecar's own. It
// is kept on clock, which counts the time the machine was suspended as the sidecar's lease clock
// does (Go's monotonic clock stops meanwhile), and only moves forward.
type knownDeadline struct {
	clock clock.PassiveClock

	mu sync.Mutex
	at time.Time // a reading of clock
}

// observe takes in the state l, read by a request sent at sent (a reading of d.clock), of the
// grant with token.
func (d *knownDeadline) observe(sent time.Time, l sidecarclient.LockStatus, token int64) {
	if l.State != sidecarclient.StateHeld || l.Token != token || l.LeaseRemainingMs <= 0 {
		return
	}
	at := sent.Add(time.Duration(l.LeaseRemainingMs) * time.Millisecond)
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.After(d.at) {
		d.at = at
	}
}

// get returns the deadline on the wall clock, as lock.Lease.Deadline does: Go's clock now plus
// the time left on d.clock, so that time.Until of it is the time really left, suspensions
// included. It is the zero time while nothing was observed.
func (d *knownDeadline) get() time.Time {
	d.mu.Lock()
	at := d.at
	d.mu.Unlock()
	if at.IsZero() {
		return time.Time{}
	}
	return time.Now().Add(at.Sub(d.clock.Now()))
}

// watchSidecar reports on lost when lock w.id stops being held with w.token: a lost or released
// event for it, a newer grant, the end of the event stream, or a state read that disagrees (the
// reads also move w.deadline). It returns after the first report or when ctx ends.
func (p *program) watchSidecar(ctx context.Context, c *sidecarclient.Client, events <-chan sidecarclient.Event, w sidecarWatch, lost chan<- error) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() == nil {
					lost <- errors.New("the sidecar ended its event stream (it is shutting down or restarting)")
				}
				return
			}
			if err := lossFromEvent(ev, w.id, w.token); err != nil {
				lost <- err
				return
			}
		case <-tick.C:
			var sent time.Time
			if w.deadline != nil {
				sent = w.deadline.clock.Now()
			}
			l, err := c.Lock(ctx, w.id)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				lost <- fmt.Errorf("cannot reach the sidecar: %w", err)
				return
			}
			if l.State != sidecarclient.StateHeld || l.Token != w.token {
				lost <- fmt.Errorf("the sidecar reports it %s", describe(l))
				return
			}
			if w.deadline != nil {
				w.deadline.observe(sent, l, w.token)
			}
		}
	}
}

// lossFromEvent says whether ev means that lock id is no longer held with token. Events about
// earlier grants (smaller tokens) are stale and ignored.
func lossFromEvent(ev sidecarclient.Event, id string, token int64) error {
	if ev.LockID != id || (ev.Token != 0 && ev.Token < token) {
		return nil
	}
	switch ev.Type {
	case sidecarclient.EventLost:
		reason := ev.Reason
		if reason == "" {
			reason = "no reason given"
		}
		return fmt.Errorf("the sidecar lost it (%s)", reason)
	case sidecarclient.EventReleased:
		return errors.New("it was released through the sidecar's API")
	case sidecarclient.EventAcquired:
		if ev.Token != token {
			return fmt.Errorf("it was granted again with token %d", ev.Token)
		}
	}
	return nil
}

// hostname returns the machine's host name for owner identities.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}
