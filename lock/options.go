package lock

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Defaults and bounds of the timing options.
const (
	DefaultLease              = 15 * time.Second
	DefaultPollInterval       = 125 * time.Millisecond
	DefaultWaiterPollInterval = time.Second
	DefaultQueueEntryTTL      = 10 * time.Second
	// DefaultHintedQueueEntryTTL is the queue entry TTL of a Locker with a Hinter (WithHinter):
	// its waiters behind the head rewrite their entries, and read the queue, every third of it.
	DefaultHintedQueueEntryTTL = 30 * time.Second
	// MaxHintedHeadPoll bounds how long the head of the queue of a Locker with a Hinter goes
	// without reading the owner record: a lost release hint costs at most this long (see
	// WithPollInterval).
	MaxHintedHeadPoll = time.Second
	MinLease          = time.Second
	MaxLease          = time.Hour
	maxRequestTimeout = 2 * time.Second
)

// Option configures a Locker. Options are checked together by New.
type Option func(*options)

type options struct {
	lease          time.Duration
	renewInterval  time.Duration
	safetyMargin   time.Duration
	requestTimeout time.Duration
	pollInterval   time.Duration
	waiterPoll     time.Duration
	queueEntryTTL  time.Duration
	ttlSet         bool // queueEntryTTL was set explicitly (WithQueueEntryTTL)
	log            logr.Logger
	clock          clock.WithDelayedExecution
	wallClock      func() time.Time
	hinter         Hinter
	zeroWait       bool
	restartSecret  []byte
	mutations      mutations // the mutation seams (mutation.go); zero outside this package's tests
	observer       func(Event)
	errs           []error
}

// positive records an error for an explicitly set duration that is not positive.
func (o *options) positive(option string, d time.Duration) {
	if d <= 0 {
		o.errs = append(o.errs, fmt.Errorf("%w: %s(%v): the duration must be positive", ErrInvalidOption, option, d))
	}
}

// WithLease sets the lease duration: how long a grant stays valid without renewal. Failover after a
// crashed holder takes about one lease. Default 15s; allowed 1s to 1h.
func WithLease(d time.Duration) Option {
	return func(o *options) { o.lease = d; o.positive("WithLease", d) }
}

// WithRenewInterval sets how often a holder renews its lease. Default lease/3. It must leave room
// for two renewals before the holder fences itself: 2 × interval ≤ lease − safety margin.
func WithRenewInterval(d time.Duration) Option {
	return func(o *options) { o.renewInterval = d; o.positive("WithRenewInterval", d) }
}

// WithSafetyMargin sets how long before the end of its lease a holder counts the lock as lost
// (self-fencing). It covers clock-rate differences between machines and the time the application
// needs to stop. Default lease/10; must be more than 0 and less than lease/2.
func WithSafetyMargin(d time.Duration) Option {
	return func(o *options) { o.safetyMargin = d; o.positive("WithSafetyMargin", d) }
}

// WithRequestTimeout bounds every single store request. Default min(2s, renew interval / 2), so
// that a renewal sent to a coordinator that never answers (a hung node) leaves time to settle it
// and renew through another before the lease runs out; at most the renew interval.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) { o.requestTimeout = d; o.positive("WithRequestTimeout", d) }
}

// WithPollInterval sets how often the head of the queue re-reads the owner record while the lock is
// held by someone else and nothing tells it of a release. Lower means faster handoff and more store
// load: without a Hinter the head makes about 1/interval reads per second (8 at the default
// 125ms). With a Hinter (WithHinter) a release hint is what wakes the head, and its reads are a
// safety net for lost hints and the sightings that expire a crashed holder's lease: it reads every
// max(interval, min(MaxHintedHeadPoll, lease/15)), 1s at the default lease. Default 125ms.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) { o.pollInterval = d; o.positive("WithPollInterval", d) }
}

// WithWaiterPollInterval sets how often a waiter behind the head re-reads the queue without a
// Hinter. With a Hinter the waiter learns from a hint that it moved up to the head, and reads the
// queue every third of the queue entry TTL as it rewrites its entry (10s by default), or every
// waiter poll if that is longer. Default 1s; at least the poll interval and at most a third of the
// queue entry TTL.
func WithWaiterPollInterval(d time.Duration) Option {
	return func(o *options) { o.waiterPoll = d; o.positive("WithWaiterPollInterval", d) }
}

// WithQueueEntryTTL sets how long the queue entry of a waiter that stopped refreshing it (because it
// died) lives on. Waiters rewrite their entry every TTL/3, and the waiters behind an entry remove it
// once it has gone unrewritten for TTL/3 plus two waiter polls (docs/design.md, "Dead waiters").
// Default 10s, or 30s with a Hinter (DefaultHintedQueueEntryTTL); at least 2s, in whole seconds.
// Lockers of one lock are assumed to share it.
func WithQueueEntryTTL(d time.Duration) Option {
	return func(o *options) { o.queueEntryTTL, o.ttlSet = d, true; o.positive("WithQueueEntryTTL", d) }
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock used for lease timing. Only differences between its readings and its
// timers are used, so it should be monotonic and keep counting while the machine is suspended.
// The default is Go's monotonic clock plus the time the machine spent suspended (CLOCK_BOOTTIME on
// Linux), because Go's own clock stops during a suspension: a holder resumed after its lease ran
// out must count the time it was away.
func WithClock(c clock.WithDelayedExecution) Option {
	return func(o *options) {
		if c == nil {
			o.errs = append(o.errs, fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption))
		}
		o.clock = c
	}
}

// WithWallClock sets the wall clock used for queue enqueue times and the display-only timestamps in
// records. Skew between machines makes the queue less fair, never unsafe.
func WithWallClock(now func() time.Time) Option { return func(o *options) { o.wallClock = now } }

// WithObserver sets a function that the Locker calls, from its own goroutines, with what it
// observes: where a waiting Acquire stands (EventQueued, at no extra store requests) and every
// renewal attempt of a held lease (EventRenewed). It must not block.
func WithObserver(f func(Event)) Option { return func(o *options) { o.observer = f } }

// WithZeroWaitRestart lets a restarted process take over its own predecessor's grant at once,
// with a new token, ahead of any queued waiter, instead of waiting out the dead predecessor's lease
// (rule 7). A process may take over only a grant whose owner has its identity and proves to have
// known the same secret: the Locker appends a tag derived from identity and secret to its owner's
// incarnation (Owner), and the tag cannot be worked back to the secret. Another process that copies
// the identity (it is readable from the owner record, and in Kubernetes from the pod) but cannot
// read the secret queues like a stranger.
//
// secret must be at least MinRestartSecret random bytes that restarts of this process can read and
// nothing else can: the sidecar keeps it in the pod's own emptyDir volume, which outlives container
// restarts and no other pod sees. The takeover also trusts that the predecessor is dead: only one
// process with this identity and secret may run at a time (the sidecar holds an exclusive file lock
// on the secret's file while it runs, and goes without zero-wait restart when it cannot take it). A
// revoked grant is never taken over this way. Default off.
func WithZeroWaitRestart(secret []byte) Option {
	return func(o *options) {
		if len(secret) < MinRestartSecret {
			o.errs = append(o.errs, fmt.Errorf("%w: WithZeroWaitRestart: the secret is %d bytes, at least %d random bytes are needed",
				ErrInvalidOption, len(secret), MinRestartSecret))
			return
		}
		o.zeroWait, o.restartSecret = true, slices.Clone(secret)
	}
}

// MinRestartSecret is the shortest secret WithZeroWaitRestart accepts, in bytes.
const MinRestartSecret = 16

// WithHinter sets how waiters are told that they are next, or that the lock was given back, so
// that they look at once instead of at their next poll (see Hinter). Without it waiters only poll.
func WithHinter(h Hinter) Option { return func(o *options) { o.hinter = h } }

func buildOptions(opts []Option) (options, error) {
	o := options{log: logr.Discard()}
	for _, opt := range opts {
		opt(&o)
	}
	if len(o.errs) > 0 {
		return o, errors.Join(o.errs...)
	}
	if o.lease == 0 {
		o.lease = DefaultLease
	}
	if o.renewInterval == 0 {
		o.renewInterval = o.lease / 3
	}
	if o.safetyMargin == 0 {
		o.safetyMargin = o.lease / 10
	}
	if o.requestTimeout == 0 {
		o.requestTimeout = min(maxRequestTimeout, o.renewInterval/2)
	}
	if o.pollInterval == 0 {
		o.pollInterval = DefaultPollInterval
	}
	if o.waiterPoll == 0 {
		o.waiterPoll = max(DefaultWaiterPollInterval, o.pollInterval)
	}
	if o.queueEntryTTL == 0 {
		o.queueEntryTTL = o.defaultQueueEntryTTL(o.hinter != nil)
	}
	if o.clock == nil {
		o.clock = defaultClock()
	}
	if o.wallClock == nil {
		o.wallClock = time.Now
	}
	if o.hinter == nil {
		o.hinter = noHinter{}
	}
	if o.observer == nil {
		o.observer = func(Event) {}
	}
	return o, o.validate()
}

// defaultQueueEntryTTL is the queue entry TTL a Locker uses when WithQueueEntryTTL is not set:
// longer with hints, whose waiters behind the head rewrite their entries only every third of it.
func (o options) defaultQueueEntryTTL(hinted bool) time.Duration {
	ttl := DefaultQueueEntryTTL
	if hinted {
		ttl = DefaultHintedQueueEntryTTL
	}
	return max(ttl, (3 * o.waiterPoll).Round(time.Second))
}

// entryTTL is the TTL that the waiter of queue entry e writes it with, as far as this Locker can
// tell: its own when set explicitly (Lockers of one lock share it), otherwise the default of e's
// mode (an entry with a hint address belongs to a Locker with a Hinter).
func (o options) entryTTL(e QueueEntry) time.Duration {
	if o.ttlSet {
		return o.queueEntryTTL
	}
	return o.defaultQueueEntryTTL(e.Hint != "")
}

// hintedHeadPoll is how long the head of the queue of a Locker with a Hinter waits between reads of
// the owner record: at most MaxHintedHeadPoll (the bound on what a lost release hint costs) and at
// most lease/15, so that the head sees each renewal of a holder soon enough for a crashed holder's
// lease to expire within about 1.05 leases of its last renewal (docs/design.md, "The poll schedule").
func (o options) hintedHeadPoll() time.Duration {
	return max(o.pollInterval, min(MaxHintedHeadPoll, o.lease/15))
}

// hintedRestPoll is how long a waiter behind the head that listens for hints waits between steps
// when no hint comes: a third of its entry's TTL, when it rewrites its entry anyway.
func (o options) hintedRestPoll(own QueueEntry) time.Duration {
	return max(o.waiterPoll, o.entryTTL(own)/3)
}

func (o options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch {
	case o.lease < MinLease || o.lease > MaxLease:
		return bad("lease %v is outside [%v, %v]", o.lease, MinLease, MaxLease)
	case o.safetyMargin <= 0 || o.safetyMargin >= o.lease/2:
		return bad("safety margin %v must be more than 0 and less than half the lease (%v)", o.safetyMargin, o.lease/2)
	case o.renewInterval <= 0 || 2*o.renewInterval > o.lease-o.safetyMargin:
		return bad("renew interval %v must be more than 0 and at most (lease − safety margin)/2 = %v, so a failed renewal is retried before the lease ends",
			o.renewInterval, (o.lease-o.safetyMargin)/2)
	case o.requestTimeout <= 0 || o.requestTimeout > o.renewInterval:
		return bad("request timeout %v must be more than 0 and at most the renew interval %v", o.requestTimeout, o.renewInterval)
	case o.pollInterval <= 0:
		return bad("poll interval %v must be more than 0", o.pollInterval)
	case o.waiterPoll < o.pollInterval:
		return bad("waiter poll interval %v must be at least the poll interval %v", o.waiterPoll, o.pollInterval)
	case o.queueEntryTTL < 2*time.Second || o.queueEntryTTL%time.Second != 0:
		return bad("queue entry TTL %v must be whole seconds and at least 2s", o.queueEntryTTL)
	case 3*o.waiterPoll > o.queueEntryTTL:
		return bad("waiter poll interval %v must be at most a third of the queue entry TTL %v", o.waiterPoll, o.queueEntryTTL)
	}
	return nil
}
