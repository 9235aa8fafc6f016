package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock"
)

// The names of the reconciler's metrics, which the chart's alerts and dashboard read
// (charts/baton, monitoring).
const (
	metricHeld           = "baton_distributedlock_held"
	metricToken          = "baton_distributedlock_token"
	metricWaiting        = "baton_distributedlock_waiting"
	metricStoreReachable = "baton_distributedlock_store_reachable"
	metricHolderChanges  = "baton_distributedlock_holder_changes_total"
	metricRevocations    = "baton_distributedlock_revocations_total"
	metricStoreRequests  = "baton_distributedlock_store_requests_total"
)

// MetricNames lists the names of the reconciler's metrics.
func MetricNames() []string {
	return []string{metricHeld, metricToken, metricWaiting, metricStoreReachable, metricHolderChanges, metricRevocations, metricStoreRequests}
}

// Metrics are the reconciler's Prometheus metrics: what the lock store said at the last reconcile,
// per DistributedLock and lock ID. A nil *Metrics records nothing.
type Metrics struct {
	held, token, waiting *prometheus.GaugeVec
	reachable            *prometheus.GaugeVec
	changes, revocations *prometheus.CounterVec
	storeRequests        *prometheus.CounterVec
}

// NewMetrics returns unregistered metrics; see Register.
func NewMetrics() *Metrics {
	lockLabels := []string{"namespace", "distributedlock", "lock"}
	gauge := func(name, help string, labels []string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, lockLabels)
	}
	return &Metrics{
		held:        gauge(metricHeld, "1 when the lock store shows a holder for the lock, else 0.", lockLabels),
		token:       gauge(metricToken, "Fencing token of the lock's current (or last) grant.", lockLabels),
		waiting:     gauge(metricWaiting, "contenders queued for the lock, not counting the holder.", lockLabels),
		reachable:   gauge(metricStoreReachable, "1 when the operator could read the DistributedLock's lock store at the last reconcile.", []string{"namespace", "distributedlock"}),
		changes:     counter(metricHolderChanges, "Grants to a new holder seen by the operator (it may miss changes between reconciles)."),
		revocations: counter(metricRevocations, "Grants revoked through the "+batonv1.AnnotationRevoke+" annotation."),
		storeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricStoreRequests,
			Help: "Requests the operator made to the DistributedLock's lock store, by kind: read (owner record, queue) or write (revocation)."},
			[]string{"namespace", "distributedlock", "kind"}),
	}
}

// Register registers m with r. Metrics already registered there (a second operator in the same
// process, in tests) are taken over, so both keep working.
func (m *Metrics) Register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []*prometheus.GaugeVec{m.held, m.token, m.waiting, m.reachable} {
		if got, err := register(r, c); err != nil {
			errs = append(errs, err)
		} else {
			*c = *got
		}
	}
	for _, c := range []*prometheus.CounterVec{m.changes, m.revocations, m.storeRequests} {
		if got, err := register(r, c); err != nil {
			errs = append(errs, err)
		} else {
			*c = *got
		}
	}
	return errors.Join(errs...)
}

func register[C prometheus.Collector](r prometheus.Registerer, c C) (C, error) {
	err := r.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("controllers: registering metrics: %w", err)
}

func (m *Metrics) observe(dl *batonv1.DistributedLock, locks []batonv1.LockStatus, changes []holderChange) {
	if m == nil {
		return
	}
	m.reachable.WithLabelValues(dl.Namespace, dl.Name).Set(1)
	for _, l := range locks {
		held := 0.0
		if l.Holder != "" {
			held = 1
		}
		m.held.WithLabelValues(dl.Namespace, dl.Name, l.LockID).Set(held)
		m.token.WithLabelValues(dl.Namespace, dl.Name, l.LockID).Set(float64(l.Token))
		m.waiting.WithLabelValues(dl.Namespace, dl.Name, l.LockID).Set(float64(l.Waiting))
	}
	for _, c := range changes {
		m.changes.WithLabelValues(dl.Namespace, dl.Name, c.LockID).Inc()
	}
}

func (m *Metrics) unreachable(dl *batonv1.DistributedLock) {
	if m != nil {
		m.reachable.WithLabelValues(dl.Namespace, dl.Name).Set(0)
	}
}

func (m *Metrics) revoked(dl *batonv1.DistributedLock, lockID string) {
	if m != nil {
		m.revocations.WithLabelValues(dl.Namespace, dl.Name, lockID).Inc()
	}
}

// forget drops every series of the DistributedLock namespace/name.
func (m *Metrics) forget(namespace, name string) {
	if m == nil {
		return
	}
	match := prometheus.Labels{"namespace": namespace, "distributedlock": name}
	for _, g := range []*prometheus.GaugeVec{m.held, m.token, m.waiting, m.reachable} {
		g.DeletePartialMatch(match)
	}
	for _, c := range []*prometheus.CounterVec{m.changes, m.revocations, m.storeRequests} {
		c.DeletePartialMatch(match)
	}
}

// counted returns store, counting its requests for dl in m (store itself when m is nil). The
// count is per call: a call the driver retries counts once, and the driver's own traffic
// (heartbeats, topology) is not counted.
func (m *Metrics) counted(dl *batonv1.DistributedLock, store lock.Store) lock.Store {
	if m == nil {
		return store
	}
	return countedStore{Store: store,
		reads:  m.storeRequests.WithLabelValues(dl.Namespace, dl.Name, "read"),
		writes: m.storeRequests.WithLabelValues(dl.Namespace, dl.Name, "write")}
}

// countedStore is a lock.Store that counts the calls made through it.
type countedStore struct {
	lock.Store
	reads, writes prometheus.Counter
}

func (s countedStore) Load(ctx context.Context, lockID string, linearizable bool) (lock.Record, bool, error) {
	s.reads.Inc()
	return s.Store.Load(ctx, lockID, linearizable)
}

func (s countedStore) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	s.reads.Inc()
	return s.Store.Queue(ctx, lockID, from, limit)
}

func (s countedStore) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	s.writes.Inc()
	return s.Store.CompareAndSwap(ctx, lockID, prev, next)
}

func (s countedStore) Enqueue(ctx context.Context, lockID string, e lock.QueueEntry, ttl time.Duration) error {
	s.writes.Inc()
	return s.Store.Enqueue(ctx, lockID, e, ttl)
}

func (s countedStore) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	s.writes.Inc()
	return s.Store.Dequeue(ctx, lockID, e)
}
