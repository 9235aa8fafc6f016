package compare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/baton-dev/baton/internal/testing/cutstore"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/test/bench/compare/lwtlock"
	"github.com/baton-dev/baton/test/bench/compare/oldalgo"
)

// System is one lock implementation under comparison.
type System interface {
	// Name labels the system's rows in the tables.
	Name() string
	// Contender returns contender i of lockID: its own lock client, as a separate process would
	// have. Lock IDs are lower-case letters, digits and dashes.
	Contender(ctx context.Context, lockID string, i int) (Contender, error)
}

// Contender is one lock client of one lock.
type Contender interface {
	// Acquire blocks until the lock is held or ctx ends.
	Acquire(ctx context.Context) (Holding, error)
}

// Holding is a held lock.
type Holding interface {
	// Release gives the lock back gracefully.
	Release(ctx context.Context) error
	// Kill stops renewing without releasing, as if the holder's process died. The contender is
	// unusable afterwards.
	Kill()
}

// OutcomeCounter is implemented by contenders that count their attempts (the old algorithm).
type OutcomeCounter interface {
	Outcomes() oldalgo.Stats
}

// RequestCounter is implemented by contenders that count their store requests (baton).
type RequestCounter interface {
	Requests() int64
}

// randomSuffix returns 8 random hex digits.
func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Baton is baton's queue lock (lock.New on cassandrastore) with default options except the lease
// and, optionally, hand-off hints.
type Baton struct {
	name    string
	stores  []lock.Store
	hinters []lock.Hinter
	opts    []lock.Option
}

// NewBaton returns baton's queue lock on stores (contender i uses stores[i % len]). A non-nil
// hinter (may be nil) is shared by every contender: the in-process hand-off hint.
func NewBaton(name string, stores []lock.Store, lease time.Duration, hinter lock.Hinter, log logr.Logger) (*Baton, error) {
	var hinters []lock.Hinter
	if hinter != nil {
		hinters = []lock.Hinter{hinter}
	}
	return NewBatonHinters(name, stores, lease, hinters, log)
}

// NewBatonHinters is NewBaton with a hinter per process: contender i uses hinters[i % len] as
// the sidecar of its pod would (several locks' contenders then share one, as several locks of
// one pod share its sidecar's). No hinters: no hints.
func NewBatonHinters(name string, stores []lock.Store, lease time.Duration, hinters []lock.Hinter, log logr.Logger) (*Baton, error) {
	if len(stores) == 0 {
		return nil, errors.New("compare: baton needs at least one store")
	}
	opts := []lock.Option{lock.WithLease(lease), lock.WithLogger(log)}
	return &Baton{name: name, stores: stores, hinters: hinters, opts: opts}, nil
}

// Name implements System.
func (b *Baton) Name() string { return b.name }

// SkipFailover implements FailoverSkipper: a killed holder sends no hint, so failover with the wake
// hint is the same as without.
func (b *Baton) SkipFailover() string {
	if len(b.hinters) > 0 {
		return "same as without the hint: a killed holder sends none"
	}
	return ""
}

// Contender implements System. Each contender's store counts its requests and can be cut off to
// kill it.
func (b *Baton) Contender(_ context.Context, lockID string, i int) (Contender, error) {
	counted := &countingStore{Store: b.stores[i%len(b.stores)]}
	cut := cutstore.New(counted)
	owner, err := lock.NewOwner(fmt.Sprintf("compare/c%d", i))
	if err != nil {
		return nil, fmt.Errorf("compare: baton owner: %w", err)
	}
	opts := b.opts
	if len(b.hinters) > 0 {
		opts = append(slices.Clip(opts), lock.WithHinter(b.hinters[i%len(b.hinters)]))
	}
	l, err := lock.New(cut, owner, opts...)
	if err != nil {
		return nil, fmt.Errorf("compare: baton locker: %w", err)
	}
	return &batonContender{l: l, cut: cut, counted: counted, lockID: lockID}, nil
}

type batonContender struct {
	l       *lock.Locker
	cut     *cutstore.Store
	counted *countingStore
	lockID  string
}

func (c *batonContender) Requests() int64 { return c.counted.n.Load() }

func (c *batonContender) Acquire(ctx context.Context) (Holding, error) {
	lease, err := c.l.Acquire(ctx, c.lockID)
	if err != nil {
		return nil, err
	}
	return &batonHolding{lease: lease, cut: c.cut}, nil
}

type batonHolding struct {
	lease *lock.Lease
	cut   *cutstore.Store
}

func (h *batonHolding) Release(ctx context.Context) error { return h.lease.Release(ctx) }
func (h *batonHolding) Kill()                             { h.cut.Cut(true) }

// countingStore counts the requests that reach the store.
type countingStore struct {
	lock.Store
	n atomic.Int64
}

func (s *countingStore) Load(ctx context.Context, id string, linearizable bool) (lock.Record, bool, error) {
	s.n.Add(1)
	return s.Store.Load(ctx, id, linearizable)
}

func (s *countingStore) CompareAndSwap(ctx context.Context, id string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	s.n.Add(1)
	return s.Store.CompareAndSwap(ctx, id, prev, next)
}

func (s *countingStore) Enqueue(ctx context.Context, id string, e lock.QueueEntry, ttl time.Duration) error {
	s.n.Add(1)
	return s.Store.Enqueue(ctx, id, e, ttl)
}

func (s *countingStore) Dequeue(ctx context.Context, id string, e lock.QueueEntry) error {
	s.n.Add(1)
	return s.Store.Dequeue(ctx, id, e)
}

func (s *countingStore) Queue(ctx context.Context, id string, from int64, limit int) ([]lock.QueueEntry, error) {
	s.n.Add(1)
	return s.Store.Queue(ctx, id, from, limit)
}

// OldAlgo is the original Cassandra lock's old algorithm (package oldalgo, docs/design.md).
type OldAlgo struct {
	sessions []*gocql.Session
	keyspace string
	lease    time.Duration
	log      logr.Logger
}

// NewOldAlgo returns the old algorithm on the tables oldalgo.EnsureSchema made in keyspace.
func NewOldAlgo(sessions []*gocql.Session, keyspace string, lease time.Duration, log logr.Logger) (*OldAlgo, error) {
	if len(sessions) == 0 {
		return nil, errors.New("compare: old algorithm needs at least one session")
	}
	return &OldAlgo{sessions: sessions, keyspace: keyspace, lease: lease, log: log}, nil
}

// Name implements System.
func (o *OldAlgo) Name() string { return "old algorithm (shadow row, retries)" }

// Contender implements System.
func (o *OldAlgo) Contender(_ context.Context, lockID string, i int) (Contender, error) {
	l, err := oldalgo.New(o.sessions[i%len(o.sessions)], o.keyspace, fmt.Sprintf("c%d-%s", i, randomSuffix()),
		oldalgo.WithLease(o.lease), oldalgo.WithLogger(o.log))
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	return &oldContender{l: l, lockID: lockID}, nil
}

type oldContender struct {
	l      *oldalgo.Locker
	lockID string
}

func (c *oldContender) Acquire(ctx context.Context) (Holding, error) {
	lk, err := c.l.GetLock(ctx, c.lockID)
	if err != nil {
		return nil, err
	}
	return oldHolding{lk}, nil
}

func (c *oldContender) Outcomes() oldalgo.Stats { return c.l.Stats() }

type oldHolding struct{ lk *oldalgo.Lock }

func (h oldHolding) Release(ctx context.Context) error { return h.lk.Release(ctx) }
func (h oldHolding) Kill()                             { h.lk.Abandon() }

// LWT is the plain LWT lock without queue (package lwtlock).
type LWT struct {
	sessions []*gocql.Session
	keyspace string
	opts     []lwtlock.Option
}

// NewLWT returns the plain LWT lock on the table lwtlock.EnsureSchema made in keyspace, polling at
// poll.
func NewLWT(sessions []*gocql.Session, keyspace string, lease, poll time.Duration, log logr.Logger) (*LWT, error) {
	if len(sessions) == 0 {
		return nil, errors.New("compare: LWT lock needs at least one session")
	}
	return &LWT{sessions: sessions, keyspace: keyspace,
		opts: []lwtlock.Option{lwtlock.WithLease(lease), lwtlock.WithPollInterval(poll), lwtlock.WithLogger(log)}}, nil
}

// Name implements System.
func (w *LWT) Name() string { return "plain LWT lock, no queue" }

// Contender implements System.
func (w *LWT) Contender(_ context.Context, lockID string, i int) (Contender, error) {
	l, err := lwtlock.New(w.sessions[i%len(w.sessions)], w.keyspace, fmt.Sprintf("c%d-%s", i, randomSuffix()), w.opts...)
	if err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	return &lwtContender{l: l, lockID: lockID}, nil
}

type lwtContender struct {
	l      *lwtlock.Locker
	lockID string
}

func (c *lwtContender) Acquire(ctx context.Context) (Holding, error) {
	lease, err := c.l.Acquire(ctx, c.lockID)
	if err != nil {
		return nil, err
	}
	return lwtHolding{lease}, nil
}

type lwtHolding struct{ lease *lwtlock.Lease }

func (h lwtHolding) Release(ctx context.Context) error { return h.lease.Release(ctx) }
func (h lwtHolding) Kill()                             { h.lease.Abandon() }

// LeaderElection is client-go's tools/leaderelection on a coordination.k8s.io/v1 Lease: acquire is
// becoming leader, release is cancelling the elector with ReleaseOnCancel.
type LeaderElection struct {
	cfg                                     *rest.Config
	namespace                               string
	leaseDuration, renewDeadline, retryWait time.Duration
	log                                     logr.Logger
}

// NewLeaderElection returns client-go leader election against the API server of cfg, with Leases in
// namespace. client-go's defaults (15 s lease, 10 s renew deadline, 2 s retry period) are scaled to
// lease, which must be whole seconds (the Lease stores leaseDurationSeconds). Every contender gets
// its own clientset without client-side rate limiting.
func NewLeaderElection(cfg *rest.Config, namespace string, lease time.Duration, log logr.Logger) (*LeaderElection, error) {
	if lease < time.Second || lease%time.Second != 0 {
		return nil, fmt.Errorf("compare: leader election lease %v must be whole seconds", lease)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling
	return &LeaderElection{
		cfg: cfg, namespace: namespace, log: log,
		leaseDuration: lease, renewDeadline: lease * 10 / 15, retryWait: lease * 2 / 15,
	}, nil
}

// Name implements System.
func (e *LeaderElection) Name() string { return "client-go leaderelection (Lease)" }

// Timings returns the lease duration, renew deadline and retry period in use.
func (e *LeaderElection) Timings() (lease, renewDeadline, retryPeriod time.Duration) {
	return e.leaseDuration, e.renewDeadline, e.retryWait
}

// Contender implements System.
func (e *LeaderElection) Contender(_ context.Context, lockID string, i int) (Contender, error) {
	client, err := kubernetes.NewForConfig(e.cfg)
	if err != nil {
		return nil, fmt.Errorf("compare: clientset: %w", err)
	}
	return &leContender{e: e, client: client, lockID: lockID, identity: fmt.Sprintf("c%d-%s", i, randomSuffix())}, nil
}

type leContender struct {
	e        *LeaderElection
	client   kubernetes.Interface
	lockID   string
	identity string
}

// Acquire runs a new LeaderElector until it leads.
func (c *leContender) Acquire(ctx context.Context) (Holding, error) {
	killed := new(atomic.Bool)
	rl := &killableLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metaFor(c.e.namespace, c.lockID),
			Client:     c.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
		},
		killed: killed,
	}
	started, exited := make(chan struct{}), make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            rl,
		LeaseDuration:   c.e.leaseDuration,
		RenewDeadline:   c.e.renewDeadline,
		RetryPeriod:     c.e.retryWait,
		ReleaseOnCancel: true,
		Name:            c.lockID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(started) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("compare: leader elector: %w", err)
	}
	runCtx, cancel := context.WithCancel(klog.NewContext(ctx, c.e.log))
	go func() {
		defer close(exited)
		le.Run(runCtx)
	}()
	select {
	case <-started:
		return &leHolding{cancel: cancel, exited: exited, killed: killed}, nil
	case <-exited:
		cancel()
		cause := context.Cause(ctx)
		if cause == nil {
			cause = errors.New("elector stopped")
		}
		return nil, fmt.Errorf("compare: leader election for %s ended without leading: %w", c.lockID, cause)
	}
}

type leHolding struct {
	cancel context.CancelFunc
	exited chan struct{}
	killed *atomic.Bool
	once   sync.Once
}

// Release cancels the elector, which writes the Lease back (ReleaseOnCancel) before Run returns.
func (h *leHolding) Release(ctx context.Context) error {
	h.once.Do(h.cancel)
	select {
	case <-h.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("compare: leader election release: %w", ctx.Err())
	}
}

// Kill cuts the elector off from the API server and stops it, so it neither renews nor releases.
func (h *leHolding) Kill() {
	h.killed.Store(true)
	h.once.Do(h.cancel)
	<-h.exited
}

// errKilled is what a killed elector's API calls return.
var errKilled = errors.New("compare: contender killed")

// killableLock is a resourcelock.Interface whose API calls fail once killed.
type killableLock struct {
	resourcelock.Interface
	killed *atomic.Bool
}

func (k *killableLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if k.killed.Load() {
		return nil, nil, errKilled
	}
	return k.Interface.Get(ctx)
}

func (k *killableLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if k.killed.Load() {
		return errKilled
	}
	return k.Interface.Create(ctx, r)
}

func (k *killableLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if k.killed.Load() {
		return errKilled
	}
	return k.Interface.Update(ctx, r)
}

func metaFor(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
