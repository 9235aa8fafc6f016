package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/hintudp"
)

// The names of the sidecar's own metric families, which the chart's alerts and dashboard read
// (charts/baton, monitoring). The histograms are exported as _bucket, _sum and _count series.
const (
	metricHeld         = "baton_lock_held"
	metricToken        = "baton_lock_token"
	metricAcquisitions = "baton_lock_acquisitions_total"
	metricLosses       = "baton_lock_losses_total"
	metricReleases     = "baton_lock_releases_total"
	metricRenewSeconds = "baton_lock_renew_seconds"
	metricStoreSeconds = "baton_store_request_seconds"
	metricStoreErrors  = "baton_store_errors_total"
)

// MetricNames lists the names of the sidecar's own metric families.
func MetricNames() []string {
	return []string{metricHeld, metricToken, metricAcquisitions, metricLosses, metricReleases, metricRenewSeconds, metricStoreSeconds, metricStoreErrors}
}

// metricSet is the sidecar's Prometheus metrics, on a registry of its own.
type metricSet struct {
	Registry     *prometheus.Registry
	held         *prometheus.GaugeVec
	token        *prometheus.GaugeVec
	acquisitions *prometheus.CounterVec
	losses       *prometheus.CounterVec
	releases     *prometheus.CounterVec
	renewals     *prometheus.HistogramVec
	requests     *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
}

// newMetricSet registers the sidecar's metrics (and the Go and process collectors) on a new registry.
func newMetricSet() *metricSet {
	m := &metricSet{
		Registry: prometheus.NewRegistry(),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricHeld,
			Help: "1 while this pod holds the lock, else 0."}, []string{"lock"}),
		token: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricToken,
			Help: "Fencing token of the lock's current or last grant to this pod."}, []string{"lock"}),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricAcquisitions,
			Help: "Grants of the lock to this pod."}, []string{"lock"}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLosses,
			Help: "Times this pod lost the lock without releasing it, by reason."}, []string{"lock", "reason"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricReleases,
			Help: "Releases of the lock by this pod."}, []string{"lock"}),
		renewals: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricRenewSeconds,
			Help:    "Latency of lease renewals by outcome (ok, error).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"lock", "outcome"}),
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricStoreSeconds,
			Help:    "Latency of lock-store requests by operation (renewals are cas).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricStoreErrors,
			Help: "Failed lock-store requests by operation."}, []string{"op"}),
	}
	m.Registry.MustRegister(m.held, m.token, m.acquisitions, m.losses, m.releases, m.renewals, m.requests, m.storeErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metricSet) acquired(id string, token int64) {
	if m == nil {
		return
	}
	m.held.WithLabelValues(id).Set(1)
	m.token.WithLabelValues(id).Set(float64(token))
	m.acquisitions.WithLabelValues(id).Inc()
}

func (m *metricSet) lost(id string, err error) {
	if m == nil {
		return
	}
	reason := "other"
	switch {
	case errors.Is(err, lock.ErrLeaseExpired):
		reason = "expired"
	case errors.Is(err, lock.ErrRevoked):
		reason = "revoked"
	case errors.Is(err, lock.ErrOwnershipLost):
		reason = "taken_over"
	}
	m.held.WithLabelValues(id).Set(0)
	m.losses.WithLabelValues(id, reason).Inc()
}

// renewed records one renewal attempt of the declared lock id.
func (m *metricSet) renewed(id string, took time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.renewals.WithLabelValues(id, outcome).Observe(took.Seconds())
}

func (m *metricSet) released(id string) {
	if m == nil {
		return
	}
	m.held.WithLabelValues(id).Set(0)
	m.releases.WithLabelValues(id).Inc()
}

// instrument wraps store so that every request's latency and failure is recorded.
func (m *metricSet) instrument(store lock.Store) lock.Store {
	return &instrumentedStore{inner: store, m: m}
}

type instrumentedStore struct {
	inner lock.Store
	m     *metricSet
}

func (s *instrumentedStore) observe(op string, start time.Time, err error) {
	s.m.requests.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.storeErrors.WithLabelValues(op).Inc()
	}
}

func (s *instrumentedStore) Load(ctx context.Context, id string, linearizable bool) (lock.Record, bool, error) {
	op := "load"
	if linearizable {
		op = "serial_load"
	}
	start := time.Now()
	rec, ok, err := s.inner.Load(ctx, id, linearizable)
	s.observe(op, start, err)
	return rec, ok, err
}

func (s *instrumentedStore) CompareAndSwap(ctx context.Context, id string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	start := time.Now()
	applied, cur, ok, err := s.inner.CompareAndSwap(ctx, id, prev, next)
	s.observe("cas", start, err)
	return applied, cur, ok, err
}

func (s *instrumentedStore) Enqueue(ctx context.Context, id string, e lock.QueueEntry, ttl time.Duration) error {
	start := time.Now()
	err := s.inner.Enqueue(ctx, id, e, ttl)
	s.observe("enqueue", start, err)
	return err
}

func (s *instrumentedStore) Dequeue(ctx context.Context, id string, e lock.QueueEntry) error {
	start := time.Now()
	err := s.inner.Dequeue(ctx, id, e)
	s.observe("dequeue", start, err)
	return err
}

func (s *instrumentedStore) Queue(ctx context.Context, id string, from int64, limit int) ([]lock.QueueEntry, error) {
	start := time.Now()
	q, err := s.inner.Queue(ctx, id, from, limit)
	s.observe("queue", start, err)
	return q, err
}

// serveMetrics serves /metrics on addr until ctx ends: an IP and port, or ":<port>" for every
// address of the pod's network namespace (what the webhook injects with --sidecar-metrics-port, so
// that Prometheus scrapes the pod's IP). The metrics are read-only and hold no secrets; the lock
// API is never served here (its TCP listener, ListenTCP, stays loopback-only). Nothing limits who
// may scrape a non-loopback address: a NetworkPolicy does, if wanted.
func serveMetrics(ctx context.Context, addr string, m *metricSet) (net.Listener, error) {
	if err := checkMetricsAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sidecar: %s: %w", sidecarcontract.MetricsAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { srv.Close() })
	return ln, nil
}

// checkMetricsAddr accepts an IP literal and port, or ":<port>"; not a host name, which would
// make the sidecar's listening address depend on DNS.
func checkMetricsAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && host != "" {
		_, err = netip.ParseAddr(host)
	}
	if err == nil {
		var n int
		if n, err = strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil {
		return sidecarcontract.Errorf(sidecarcontract.MetricsAddr, "is %q: give an IP and port such as %s, or :<port> for every address of the pod", addr, sidecarcontract.MetricsAddr.Default())
	}
	return nil
}

// hintCollector exports a hint socket's counts (hintudp.Stats) as Prometheus counters.
type hintCollector struct {
	stats        func() hintudp.Stats
	sent, failed *prometheus.Desc
	received     *prometheus.Desc
	unanswered   *prometheus.Desc
}

// watchHints exports the counts of the sidecar's hint socket: baton_hints_sent_total,
// baton_hint_send_failures_total, baton_hints_received_total by result (delivered to a waiting
// lock, malformed, for no waiter here, or a probe of the hint path, answered with an echo counted
// as sent) and baton_hint_probes_unanswered_total by reason (nobody waiting for the lock here, a
// refused source, over the echo budget).
func (m *metricSet) watchHints(stats func() hintudp.Stats) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(&hintCollector{
		stats:    stats,
		sent:     prometheus.NewDesc("baton_hints_sent_total", "Hand-off hints, probes and echoes sent to other sidecars.", nil, nil),
		failed:   prometheus.NewDesc("baton_hint_send_failures_total", "Hand-off hints that could not be sent (no usable address, or the send failed).", nil, nil),
		received: prometheus.NewDesc("baton_hints_received_total", "Datagrams received on the hint port, by result: delivered (a hint or echo, to a waiting lock), nobody_waiting, malformed, probe (another sidecar checking that its hints reach it).", []string{"result"}, nil),
		unanswered: prometheus.NewDesc("baton_hint_probes_unanswered_total",
			"Probes received on the hint port and not echoed, by reason: not_waiting (no other waiter of the lock here), refused (a source a hint could not go to, or not on the hint port), limited (over the echo budget: the prober polls).",
			[]string{"reason"}, nil),
	})
}

func (c *hintCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sent
	ch <- c.failed
	ch <- c.received
	ch <- c.unanswered
}

func (c *hintCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(s.Sent))
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(s.SendFailed))
	for result, n := range map[string]int{"delivered": s.Delivered, "nobody_waiting": s.NobodyWaiting, "malformed": s.Malformed, "probe": s.Probes} {
		ch <- prometheus.MustNewConstMetric(c.received, prometheus.CounterValue, float64(n), result)
	}
	for reason, n := range map[string]int{"not_waiting": s.NotWaiting, "refused": s.Refused, "limited": s.Limited} {
		ch <- prometheus.MustNewConstMetric(c.unanswered, prometheus.CounterValue, float64(n), reason)
	}
}
