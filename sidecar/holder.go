package sidecar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/sidecarclient"
)

// subscriberBuffer is how many events a slow subscriber may lag behind before its stream is
// closed (it then reconnects and reads the current state; it never silently misses a loss).
const subscriberBuffer = 256

// Holder holds the pod's locks and serves their state; it implements sidecarapi.Service.
type Holder struct {
	opts    Options
	store   lock.Store
	locker  *lock.Locker
	log     logr.Logger
	metrics *metricSet // nil: no metrics

	mu       sync.Mutex
	locks    map[string]*lockState // by declared lock ID
	byStore  map[string]string     // store lock ID → declared lock ID
	subs     map[chan sidecarclient.Event]struct{}
	started  bool
	stopping bool
	cancel   context.CancelFunc
	changes  chan struct{}
	wg       sync.WaitGroup

	// Blocking-mode hold loops and Try-mode acquisitions in flight: Shutdown cancels them (cancel,
	// stopAcquiring) and waits for them; a grant they win once it began is given back at once.
	acquiring     sync.WaitGroup
	stopAcquiring context.Context
	stopAll       context.CancelFunc

	back holdBack // keeps the holder away from its locks while its pod should not hold them; guarded by mu

	// mutations selects deliberately wrong variants of the holder, for the one-pod simulation's
	// mutation test only (onepodsim_test.go sets it); zero everywhere else.
	mutations holderMutations
}

// holderMutations are deliberately wrong variants of the Holder's Try-mode API, so that the
// one-pod simulation can prove that its checks catch them.
type holderMutations uint8

const (
	// mutSharedGrant: a second acquire while the pod holds or is acquiring the lock is answered
	// with the pod's current status, as if it were granted.
	mutSharedGrant holderMutations = 1 << iota
	// mutReleaseAnyToken: a release is not bound to its token.
	mutReleaseAnyToken
)

type lockState struct {
	status   sidecarclient.LockStatus
	lease    *lock.Lease
	everHeld bool
	// yield asks the Blocking-mode hold loop to release and queue again; it answers on the
	// request's reply channel.
	yield chan yieldRequest
	// givingUp is the lease being given up because the pod should not hold it (PodReading).
	givingUp *lock.Lease
	// acquiring is set while a Try-mode Acquire of the lock is in progress: a grant goes to one
	// request only, so another one meanwhile is refused (ErrAcquiring).
	acquiring bool
}

// yieldRequest asks the Blocking-mode hold loop to release its lease (the event says why) and
// queue again; with a token (not 0), only if it is that lease's.
type yieldRequest struct {
	reason string
	token  int64
	reply  chan error
}

var _ sidecarapi.Service = (*Holder)(nil)

// NewHolder returns a Holder for the validated options opts on store. Extra lock options (for
// example a test clock or a hinter) are passed to the lock.Locker. It records no metrics.
func NewHolder(opts Options, store lock.Store, log logr.Logger, lockOpts ...lock.Option) (*Holder, error) {
	return newHolder(opts, store, log, nil, lockOpts...)
}

// newInstrumentedHolder is NewHolder with metrics: store requests and lock events are recorded in m.
func newInstrumentedHolder(opts Options, store lock.Store, log logr.Logger, m *metricSet, lockOpts ...lock.Option) (*Holder, error) {
	return newHolder(opts, m.instrument(store), log, m, lockOpts...)
}

func newHolder(opts Options, store lock.Store, log logr.Logger, m *metricSet, lockOpts ...lock.Option) (*Holder, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	owner, err := lock.NewOwner(opts.Owner())
	if err != nil {
		return nil, fmt.Errorf("sidecar: owner identity: %w", err)
	}
	h := &Holder{
		opts: opts, store: store, log: log, metrics: m,
		locks:   make(map[string]*lockState, len(opts.LockIDs)),
		byStore: make(map[string]string, len(opts.LockIDs)),
		subs:    make(map[chan sidecarclient.Event]struct{}),
		changes: make(chan struct{}, 1),
	}
	h.stopAcquiring, h.stopAll = context.WithCancel(context.Background())
	h.back.holdBackUntilRead(opts)
	// Zero-wait restart (lock.WithZeroWaitRestart) comes with lockOpts when the caller has the
	// pod's restart proof (Run).
	all := append([]lock.Option{lock.WithLease(opts.Lease), lock.WithLogger(log), lock.WithObserver(h.observe)}, lockOpts...)
	if h.locker, err = lock.New(store, owner, all...); err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	for _, id := range opts.LockIDs {
		h.locks[id] = &lockState{status: sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, yield: make(chan yieldRequest)}
		h.byStore[opts.StoreLockID(id)] = id
	}
	return h, nil
}

// Start begins holding: in Blocking mode it acquires every declared lock and keeps holding it,
// queueing again after a loss, until Shutdown. It returns at once.
func (h *Holder) Start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		cancel()
		return
	}
	h.cancel = cancel
	if h.opts.Mode == batonv1.ModeTry {
		h.started = true
	}
	h.mu.Unlock()
	if h.opts.Mode != batonv1.ModeBlocking {
		return
	}
	for _, id := range h.opts.LockIDs {
		h.acquiring.Go(func() { h.hold(ctx, id) })
	}
}

// hold keeps one lock held in Blocking mode.
func (h *Holder) hold(ctx context.Context, id string) {
	backoff := time.Second
	yields := h.locks[id].yield
	var yielded chan error // answered once the status says the lock is queued for again
	var yieldErr error
	defer func() {
		if yielded != nil { // shutting down right after a yield
			yielded <- yieldErr
		}
	}()
	for ctx.Err() == nil {
		ready, leave := h.holdBackState()
		if ready != nil {
			// The pod should not hold the lock (its app is not ready, or it is superseded): out
			// of the queue until that is over.
			reason := h.holdBackStatus()
			h.update(id, func(s *lockState) {
				s.status = sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle, Token: s.status.Token, Reason: reason}
			})
			if yielded != nil {
				yielded <- yieldErr
				yielded = nil
			}
			select {
			case <-ready:
			case <-ctx.Done():
				return
			}
			continue
		}
		h.update(id, func(s *lockState) {
			reason := "joining the queue"
			switch {
			case yielded != nil:
				reason = "yielded: queueing again behind the waiters"
			case s.status.State == sidecarclient.StateLost:
				reason = "queueing again after the lock was lost: " + s.status.Reason
			}
			s.status = sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateWaiting, Reason: reason}
		})
		if yielded != nil {
			yielded <- yieldErr
			yielded = nil
		}
		endAcquiring, err := h.beginAcquiring()
		if err != nil {
			continue // held back since holdBackState: the top of the loop waits
		}
		waitCtx, stopWaiting := context.WithCancel(ctx)
		stop := context.AfterFunc(leave, stopWaiting) // held back meanwhile: leave the queue
		lease, err := h.locker.Acquire(waitCtx, h.opts.StoreLockID(id))
		endAcquiring()
		stop()
		stopWaiting()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if leave.Err() != nil {
				continue // held back: the top of the loop waits
			}
			h.update(id, func(s *lockState) { s.status.State, s.status.Reason = sidecarclient.StateWaiting, err.Error() })
			_ = ctxtime.Sleep(ctx, backoff)
			continue
		}
		if !h.acquired(id, lease, false) {
			h.giveBack(id, lease, "shutdown began")
			return
		}
		req, ok := h.holding(ctx, id, lease, yields)
		switch {
		case ctx.Err() != nil:
			return // Shutdown releases it
		case ok:
			// Release, then queue again at the back: the waiters ahead are granted first.
			yielded, yieldErr = req.reply, h.release(ctx, id, lease, req.reason)
			continue
		}
		h.ended(id, lease)
	}
}

// holding waits while the hold loop holds lease: until it ends (false), ctx ends (false), or a
// yield request for it comes (true). A request that names another grant's token is answered
// ErrTokenMismatch at once and the lease kept.
func (h *Holder) holding(ctx context.Context, id string, lease *lock.Lease, yields <-chan yieldRequest) (yieldRequest, bool) {
	for {
		select {
		case <-lease.Done():
			return yieldRequest{}, false
		case req := <-yields:
			if req.token != 0 && req.token != lease.Token() {
				req.reply <- errOtherGrant(id, lease.Token(), req.token)
				continue
			}
			return req, true
		case <-ctx.Done():
			return yieldRequest{}, false
		}
	}
}

// errOtherGrant is ErrTokenMismatch for a request naming token while the pod holds id with held.
func errOtherGrant(id string, held, token int64) error {
	return fmt.Errorf("%w: this pod holds %s with token %d, not %d; that grant is left alone (the grant with token %d ended)",
		sidecarclient.ErrTokenMismatch, id, held, token, token)
}

// acquired records a new lease and tells subscribers; with watch it also reports the lease's end
// when it comes by itself. Once Shutdown began it does neither and returns false: the caller gives
// the lease back (giveBack), as Shutdown already collected what it releases.
func (h *Holder) acquired(id string, lease *lock.Lease, watch bool) bool {
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return false
	}
	if watch {
		h.wg.Go(func() {
			<-lease.Done()
			h.ended(id, lease)
		})
	}
	s := h.locks[id]
	s.lease, s.everHeld = lease, true
	now := time.Now()
	s.status = sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: lease.Token(), Holder: h.podName(), HeldSince: now}
	if h.opts.Mode == batonv1.ModeBlocking && !h.started {
		h.started = h.allEverHeldLocked()
	}
	// Metrics first: a subscriber that sees the event and then reads the metrics sees it counted.
	h.metrics.acquired(id, lease.Token())
	h.publishLocked(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: id, Token: lease.Token(), Time: now})
	h.mu.Unlock()
	h.log.Info("lock held", "lock", id, "token", lease.Token())
	return true
}

// giveBack releases a lease that nobody is told of (it was granted after Shutdown began, or to a
// request that ended meanwhile), unreported, within the shutdown timeout; why says which.
func (h *Holder) giveBack(id string, lease *lock.Lease, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.opts.ShutdownTimeout)
	defer cancel()
	err := lease.Release(ctx)
	h.log.Info("released a lock as soon as it was granted", "lock", id, "token", lease.Token(), "why", why, "confirmed", err == nil)
}

// ended records that a lease ended on its own (lost or revoked).
func (h *Holder) ended(id string, lease *lock.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.locks[id]
	if s.lease != lease {
		return
	}
	reason := "lost"
	if err := lease.Err(); err != nil {
		reason = strings.TrimPrefix(err.Error(), "lock: ")
	}
	if errors.Is(lease.Err(), lock.ErrReleased) {
		return // released through the API or at shutdown: already reported
	}
	s.lease = nil
	s.status = sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateLost, Token: lease.Token(), Reason: reason}
	h.metrics.lost(id, lease.Err()) // before the event, as in acquired
	h.publishLocked(sidecarclient.Event{Type: sidecarclient.EventLost, LockID: id, Token: lease.Token(), Reason: reason, Time: lease.EndedAt()})
	h.log.Info("lock lost", "lock", id, "token", lease.Token(), "reason", reason)
}

// observe turns what the Locker observes into status and metrics under the declared lock ID: an
// Acquire's place in the queue becomes the waiting status ("position 2"), a renewal attempt a
// metric.
func (h *Holder) observe(e lock.Event) {
	h.mu.Lock()
	id, ok := h.byStore[e.LockID]
	h.mu.Unlock()
	if !ok {
		return
	}
	switch e.Kind {
	case lock.EventQueued:
		h.waiting(id, e)
	case lock.EventRenewed:
		h.metrics.renewed(id, e.Took, e.Err)
	}
}

// waiting records a waiting Acquire's place in the queue in id's status.
func (h *Holder) waiting(id string, p lock.Event) {
	h.update(id, func(s *lockState) {
		if s.lease != nil {
			return
		}
		if p.Holder != "" {
			s.status.Holder = podName(p.Holder)
		} else {
			s.status.QueuePosition = p.Ahead + 1
		}
		s.status.State = sidecarclient.StateWaiting
		s.status.Reason = fmt.Sprintf("waiting: position %d for lock %s", s.status.QueuePosition, id)
		if s.status.Holder != "" {
			s.status.Reason += ", held by " + s.status.Holder
		}
	})
}

// update changes one lock's status under the lock and signals a change.
func (h *Holder) update(id string, f func(*lockState)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	before := h.locks[id].status
	f(h.locks[id])
	if h.locks[id].status != before {
		h.signalLocked()
	}
}

func (h *Holder) signalLocked() {
	select {
	case h.changes <- struct{}{}:
	default:
	}
}

// Changes returns a channel that receives after any change of state (for the readiness gate).
func (h *Holder) Changes() <-chan struct{} { return h.changes }

func (h *Holder) publishLocked(e sidecarclient.Event) {
	h.signalLocked()
	for ch := range h.subs {
		select {
		case ch <- e:
		default:
			// Too slow: end its stream so that it reconnects and rereads the state.
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *Holder) allEverHeldLocked() bool {
	for _, s := range h.locks {
		if !s.everHeld {
			return false
		}
	}
	return true
}

func (h *Holder) podName() string { return h.opts.Pod.Namespace + "/" + h.opts.Pod.Name }

// podName turns a lock owner string into "namespace/name" of its pod (or the identity as is).
func podName(owner string) string {
	ns, name := sidecarcontract.PodOfOwner(owner)
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// Locks implements sidecarapi.Service.
func (h *Holder) Locks() []sidecarclient.LockStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]sidecarclient.LockStatus, 0, len(h.opts.LockIDs))
	for _, id := range h.opts.LockIDs {
		out = append(out, h.statusLocked(id))
	}
	return out
}

// Lock implements sidecarapi.Service.
func (h *Holder) Lock(id string) (sidecarclient.LockStatus, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.locks[id]; !ok {
		return sidecarclient.LockStatus{}, false
	}
	return h.statusLocked(id), true
}

func (h *Holder) statusLocked(id string) sidecarclient.LockStatus {
	s := h.locks[id]
	st := s.status
	if s.lease != nil {
		left := s.lease.Remaining()
		st.LeaseRemainingMs, st.LeaseMs = left.Milliseconds(), h.opts.Lease.Milliseconds()
		if left <= 0 && st.State == sidecarclient.StateHeld {
			// The self-fence deadline has passed and the loss is on its way (its goroutine may not
			// have run yet, or the machine was just resumed): never report held past the deadline.
			st.State, st.Reason, st.LeaseRemainingMs, st.LeaseMs, st.HeldSince = sidecarclient.StateLost, "lease expired: its self-fence deadline passed", 0, 0, time.Time{}
		}
	}
	return st
}

// Acquire implements sidecarapi.Service (Try mode). A grant goes to one request only: while
// another acquisition of the lock is in progress in the pod it answers ErrAcquiring, and while
// the pod holds the lock ErrHeldByPod, without asking the store. The sidecar cannot tell the
// processes of its pod apart, so a process that asks again for a grant it already has (it lost the
// answer) is refused too; it can read the token (Lock) and release that grant.
func (h *Holder) Acquire(ctx context.Context, id string, wait time.Duration) (sidecarclient.LockStatus, error) {
	if err := h.tryModeLock(id); err != nil {
		return sidecarclient.LockStatus{}, err
	}
	h.awaitFirstReading(ctx)
	leave := h.waitingContext() // before the check: a hold-back that begins after it ends this wait
	endAcquiring, heldBack := h.beginAcquiring()
	if heldBack != nil {
		st, _ := h.Lock(id)
		return st, heldBack
	}
	defer endAcquiring()
	ending, err := h.startAcquiring(id)
	if errors.Is(err, errSharedGrant) {
		st, _ := h.Lock(id) // the mutant: whatever the pod has, as if granted
		return st, nil
	}
	if err != nil {
		st, _ := h.Lock(id)
		if errors.Is(err, sidecarclient.ErrShuttingDown) {
			st = sidecarclient.LockStatus{}
		}
		return st, err
	}
	defer h.doneAcquiring(id)
	reqCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(h.stopAcquiring, cancel)()
	defer context.AfterFunc(leave, cancel)() // held back meanwhile: leave the queue
	var lease *lock.Lease
	if err = h.awaitEnd(ctx, id, ending); err == nil {
		lease, err = h.acquireLease(ctx, id, wait)
	}
	switch {
	case err != nil && h.stopAcquiring.Err() != nil && reqCtx.Err() == nil:
		return sidecarclient.LockStatus{}, fmt.Errorf("%w: stopped waiting for %s", sidecarclient.ErrShuttingDown, id)
	case err != nil && reqCtx.Err() == nil && h.errHeldBack() != nil:
		st, _ := h.Lock(id)
		return st, h.errHeldBack()
	case errors.Is(err, lock.ErrAlreadyHeld):
		// The Locker still counts an earlier grant of this pod that ended a moment ago: nothing
		// was granted to this request.
		st, _ := h.Lock(id)
		return st, fmt.Errorf("%w: the pod's previous grant of %s is still ending (%w)", sidecarclient.ErrAcquiring, id, err)
	case errors.Is(err, lock.ErrLocked):
		st, _ := h.Lock(id)
		return st, fmt.Errorf("%w: %w", sidecarclient.ErrLocked, err)
	case err != nil:
		return sidecarclient.LockStatus{}, err
	}
	if reqCtx.Err() != nil {
		// The caller went away as the grant came: nobody would learn its token or release it.
		h.giveBack(id, lease, "the request ended")
		return sidecarclient.LockStatus{}, reqCtx.Err()
	}
	if !h.acquired(id, lease, true) {
		h.giveBack(id, lease, "shutdown began")
		return sidecarclient.LockStatus{}, fmt.Errorf("%w: %s was granted as shutdown began, and released", sidecarclient.ErrShuttingDown, id)
	}
	st, _ := h.Lock(id)
	return st, nil
}

// errSharedGrant is how startAcquiring tells Acquire to answer as the mutSharedGrant variant does.
var errSharedGrant = errors.New("sidecar: shared grant (test variant)")

// startAcquiring marks a Try-mode acquisition of id as in progress, unless the holder is shutting
// down (ErrShuttingDown), another one is (ErrAcquiring) or the pod holds id (ErrHeldByPod). It
// returns the pod's grant of id that passed its deadline and is ending, if any. doneAcquiring
// ends the mark.
func (h *Holder) startAcquiring(id string) (ending *lock.Lease, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.locks[id]
	switch {
	case h.stopping:
		return nil, fmt.Errorf("%w: not acquiring %s", sidecarclient.ErrShuttingDown, id)
	case h.mutations&mutSharedGrant != 0 && (s.acquiring || s.lease != nil && s.lease.Remaining() > 0):
		return nil, errSharedGrant
	case s.acquiring:
		return nil, fmt.Errorf("%w: another request of this pod is acquiring %s", sidecarclient.ErrAcquiring, id)
	case s.lease != nil && s.lease.Remaining() > 0:
		return nil, fmt.Errorf("%w: %s is held with token %d", sidecarclient.ErrHeldByPod, id, s.lease.Token())
	}
	s.acquiring = true
	h.acquiring.Add(1)
	return s.lease, nil
}

// awaitEnd waits until lease, the pod's previous grant of id that passed its self-fence deadline
// (nil: none), has ended (within a timer step of the deadline), reports its end, and lets it give
// the record back (bounded by one lease), so that a new acquisition starts from a clean slate. It
// returns ctx's error if ctx ends first.
func (h *Holder) awaitEnd(ctx context.Context, id string, lease *lock.Lease) error {
	if lease == nil {
		return nil
	}
	select {
	case <-lease.Done():
		h.ended(id, lease)
	case <-ctx.Done():
		return ctx.Err()
	}
	_ = lease.Release(ctx) // ended already: this only waits for the give-back
	return ctx.Err()
}

// doneAcquiring ends the mark of startAcquiring.
func (h *Holder) doneAcquiring(id string) {
	h.mu.Lock()
	h.locks[id].acquiring = false
	h.mu.Unlock()
	h.acquiring.Done()
}

// acquireLease asks the Locker for id: one try without a wait, else waiting up to wait, which
// ends as lock.ErrLocked.
func (h *Holder) acquireLease(ctx context.Context, id string, wait time.Duration) (*lock.Lease, error) {
	if wait <= 0 {
		return h.locker.TryAcquire(ctx, h.opts.StoreLockID(id))
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	lease, err := h.locker.Acquire(wctx, h.opts.StoreLockID(id))
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w: not granted within %v", lock.ErrLocked, wait)
	}
	return lease, err
}

// Release implements sidecarapi.Service (Try mode): with a token (not 0) it releases only the
// grant with that token, and answers ErrTokenMismatch while the pod holds another one.
func (h *Holder) Release(ctx context.Context, id string, token int64) (sidecarclient.LockStatus, error) {
	if err := h.tryModeLock(id); err != nil {
		return sidecarclient.LockStatus{}, err
	}
	h.mu.Lock()
	lease := h.locks[id].lease
	st := h.statusLocked(id)
	h.mu.Unlock()
	switch {
	case lease == nil:
		return st, fmt.Errorf("%w: %s", sidecarclient.ErrNotHeld, id)
	case token != 0 && token != lease.Token() && h.mutations&mutReleaseAnyToken == 0:
		return st, errOtherGrant(id, lease.Token(), token)
	}
	err := h.release(ctx, id, lease, "")
	st, _ = h.Lock(id)
	return st, err
}

// Yield implements sidecarapi.Service: it releases lockID (with a token, only the grant with that
// token) and queues again behind the waiters, so that the next one is granted now. In Blocking
// mode the sidecar takes its turn again by itself and Yield answers once the lock is released; in
// Try mode Yield then acquires again, waiting up to wait as Acquire does.
func (h *Holder) Yield(ctx context.Context, id string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
	return h.yieldGrant(ctx, id, token, wait, "yielded")
}

// yield is Yield of whatever grant the pod holds, with the reason the released event gives.
func (h *Holder) yield(ctx context.Context, id string, wait time.Duration, reason string) (sidecarclient.LockStatus, error) {
	return h.yieldGrant(ctx, id, 0, wait, reason)
}

// yieldGrant is Yield with the reason the released event gives.
func (h *Holder) yieldGrant(ctx context.Context, id string, token int64, wait time.Duration, reason string) (sidecarclient.LockStatus, error) {
	if err := h.declared(id); err != nil {
		return sidecarclient.LockStatus{}, err
	}
	s := h.locks[id]
	h.mu.Lock()
	lease, stopping := s.lease, h.stopping
	h.mu.Unlock()
	switch {
	case stopping:
		return sidecarclient.LockStatus{}, fmt.Errorf("%w: not yielding %s", sidecarclient.ErrShuttingDown, id)
	case lease == nil:
		st, _ := h.Lock(id)
		return st, fmt.Errorf("%w: %s, so there is nothing to yield", sidecarclient.ErrNotHeld, id)
	case token != 0 && token != lease.Token():
		st, _ := h.Lock(id)
		return st, errOtherGrant(id, lease.Token(), token)
	}
	if h.opts.Mode == batonv1.ModeTry {
		if err := h.release(ctx, id, lease, reason); err != nil {
			st, _ := h.Lock(id)
			return st, err
		}
		return h.Acquire(ctx, id, wait)
	}
	reply := make(chan error, 1)
	select {
	case s.yield <- yieldRequest{reason: reason, token: token, reply: reply}:
	case <-lease.Done(): // lost meanwhile
		st, _ := h.Lock(id)
		return st, fmt.Errorf("%w: %s ended before it could be yielded", sidecarclient.ErrNotHeld, id)
	case <-ctx.Done():
		return sidecarclient.LockStatus{}, ctx.Err()
	}
	var err error
	select {
	case err = <-reply:
	case <-ctx.Done():
		err = ctx.Err()
	}
	st, _ := h.Lock(id)
	return st, err
}

// release gives a lease back and reports it; reason, when given, says why (the released event
// carries it, and the status until the lock is queued for again).
func (h *Holder) release(ctx context.Context, id string, lease *lock.Lease, reason string) error {
	err := lease.Release(ctx) // Done closes before this returns, even on error
	h.mu.Lock()
	s := h.locks[id]
	if s.lease == lease {
		s.lease = nil
		s.status = sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle, Token: lease.Token(), Reason: cmp.Or(reason, "released")}
		h.metrics.released(id) // before the event, as in acquired
		h.publishLocked(sidecarclient.Event{Type: sidecarclient.EventReleased, LockID: id, Token: lease.Token(), Reason: reason, Time: lease.EndedAt()})
	}
	h.mu.Unlock()
	h.log.Info("lock released", "lock", id, "token", lease.Token(), "confirmed", err == nil, "reason", cmp.Or(reason, "released"))
	return err
}

func (h *Holder) tryModeLock(id string) error {
	if err := h.declared(id); err != nil {
		return err
	}
	if h.opts.Mode != batonv1.ModeTry {
		return fmt.Errorf("%w: %s is held by the sidecar in %s mode", sidecarclient.ErrNotTryMode, id, h.opts.Mode)
	}
	return nil
}

// declared returns ErrUnknownLock, listing the declared locks, unless id is one of them.
func (h *Holder) declared(id string) error {
	if _, ok := h.locks[id]; !ok {
		return fmt.Errorf("%w: %q is not declared (declared: %s)", sidecarclient.ErrUnknownLock, id, strings.Join(h.opts.LockIDs, ", "))
	}
	return nil
}

// Subscribe implements sidecarapi.Service.
func (h *Holder) Subscribe() (<-chan sidecarclient.Event, func()) {
	ch := make(chan sidecarclient.Event, subscriberBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		close(ch)
		return ch, func() {}
	}
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// Healthy implements sidecarapi.Service: the store answers a read of the first lock.
func (h *Holder) Healthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, _, err := h.store.Load(ctx, h.opts.StoreLockID(h.opts.LockIDs[0]), false); err != nil {
		return fmt.Errorf("lock store unreachable: %w", err)
	}
	return nil
}

// Ready implements sidecarapi.Service: every declared lock is held.
func (h *Holder) Ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.locks {
		if s.lease == nil || !s.lease.Valid() {
			return false
		}
	}
	return true
}

// Started implements sidecarapi.Service.
func (h *Holder) Started() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started
}

// Shutdown stops acquiring (Try-mode acquisitions in flight end with ErrShuttingDown), releases
// every held lock (bounded by ctx), reports the releases, waits for the acquisitions to end (one
// that wins a grant meanwhile gives it back unreported) and ends every event stream.
func (h *Holder) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.stopping = true // from now on a grant is given back by its acquisition (acquired, giveBack)
	cancel := h.cancel
	held := make(map[string]*lock.Lease)
	for id, s := range h.locks {
		if s.lease != nil {
			held[id] = s.lease
		}
	}
	h.mu.Unlock()
	h.stopAll()
	if cancel != nil {
		cancel()
	}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, lease := range held {
		wg.Go(func() {
			if err := h.release(ctx, id, lease, "shutting down"); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Acquisitions still in flight end now; one granted meanwhile gives its lease back first.
	acquiring := make(chan struct{})
	go func() { h.acquiring.Wait(); close(acquiring) }()
	select {
	case <-acquiring:
	case <-ctx.Done():
	}
	h.wg.Wait()
	h.mu.Lock()
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
	h.mu.Unlock()
	return errors.Join(errs...)
}
