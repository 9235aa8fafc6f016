package storepool

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// DefaultIdle is how long an unused session stays open.
const DefaultIdle = 10 * time.Minute

// closeTimeout bounds closing one session (see cassandrastore.CloseSession).
const closeTimeout = 5 * time.Second

// key identifies a connection in the pool: every field, secrets and TLS material included.
func key(c cassandrastore.Connection) string {
	b, _ := json.Marshal(c) // strings, numbers and byte slices: cannot fail
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// Pool hands out lock stores by connection. It is safe for concurrent use; Close it when done.
type Pool struct {
	log          logr.Logger
	ensureSchema bool
	schemaFor    func(cassandrastore.Connection) bool // nil: every connection
	replication  string
	idle         time.Duration
	connectWait  time.Duration
	now          func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	retry   retryPolicy // its map guarded by mu
	closed  bool
}

type entry struct {
	ready   chan struct{} // closed once session/store/err are set
	started time.Time     // when the attempt began
	session *gocql.Session
	store   lock.Store
	err     error
	used    time.Time // guarded by Pool.mu
}

// Option configures a Pool.
type Option func(*Pool)

// WithEnsureSchema makes the pool create the keyspace and tables (cassandrastore.EnsureSchema,
// with the CQL replication map given, or cassandrastore.DefaultReplication when empty) before it
// first uses a connection for which only returns true (every connection when only is nil). only
// must depend on the connection alone.
func WithEnsureSchema(replication string, only func(cassandrastore.Connection) bool) Option {
	return func(p *Pool) { p.ensureSchema, p.replication, p.schemaFor = true, replication, only }
}

// WithIdle sets how long an unused session stays open (default DefaultIdle).
func WithIdle(d time.Duration) Option { return func(p *Pool) { p.idle = d } }

// WithRetry sets the negative cache: a connection whose attempt failed is not tried again for
// initial (default DefaultRetryInitial), doubled with every failure in a row up to max (default
// DefaultRetryMax); each delay is drawn between half and all of that, so that connections that
// failed together are not tried again together.
func WithRetry(initial, maxDelay time.Duration) Option {
	return func(p *Pool) { p.retry.initial, p.retry.max = initial, maxDelay }
}

// WithConnectWait sets how long Store waits for a connection attempt, counted from the attempt's
// start (default DefaultConnectWait; 0: until the caller's context ends).
func WithConnectWait(d time.Duration) Option { return func(p *Pool) { p.connectWait = d } }

// WithLogger sets the logger.
func WithLogger(l logr.Logger) Option { return func(p *Pool) { p.log = l } }

// New returns an empty pool.
func New(opts ...Option) *Pool {
	p := &Pool{log: logr.Discard(), idle: DefaultIdle, connectWait: DefaultConnectWait, now: time.Now,
		entries: map[string]*entry{}, retry: newRetryPolicy()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// ErrClosed is returned by Store after Close.
var ErrClosed = errors.New("storepool: closed")

// Store returns the lock store of conn, connecting on first use (conn.ClusterName, when set, is
// checked then). Concurrent calls for the same connection share one attempt, and wait for it at
// most the connect wait from its start (WithConnectWait): after that they fail at once while it
// goes on, with ErrConnecting for a first attempt and the last failure's *RetryError, Trying set,
// for a retry. A failed attempt's session is not kept; its error, a *RetryError, is returned
// without a new attempt until its RetryAt (WithRetry). So a hung Cassandra holds up a caller for
// at most the connect wait per retry, not for every call. Not guaranteed: that a store once
// returned keeps answering; a hung read on it is bounded only by the caller's context and the
// driver's timeouts.
func (p *Pool) Store(ctx context.Context, conn cassandrastore.Connection) (lock.Store, error) {
	k := key(conn)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	now := p.now()
	stale := p.sweepLocked(k)
	p.retry.sweepLocked(now)
	if rerr := p.retry.blockedLocked(k, now); rerr != nil {
		p.mu.Unlock()
		closeAll(stale)
		return nil, rerr
	}
	e, ok := p.entries[k]
	if !ok {
		e = &entry{ready: make(chan struct{}), started: now}
		p.entries[k] = e
		go p.connect(conn, k, e)
	}
	e.used = now
	p.mu.Unlock()
	closeAll(stale)

	if err := p.wait(ctx, conn, k, e, now); err != nil {
		return nil, err
	}
	if e.err != nil {
		return nil, e.err
	}
	return e.store, nil
}

// wait waits for e's attempt to end, until the connect wait from its start has passed (counted
// from now) or ctx ends. It returns nil once the attempt ended (its outcome is in e).
func (p *Pool) wait(ctx context.Context, conn cassandrastore.Connection, k string, e *entry, now time.Time) error {
	select {
	case <-e.ready:
		return nil // connected or failed already: no timer
	default:
	}
	var waitEnd <-chan time.Time
	if p.connectWait > 0 {
		t := time.NewTimer(max(e.started.Add(p.connectWait).Sub(now), 0))
		defer t.Stop()
		waitEnd = t.C
	}
	select {
	case <-e.ready:
		return nil
	case <-waitEnd:
		p.mu.Lock()
		rerr := p.retry.tryingLocked(k, e.started)
		p.mu.Unlock()
		if rerr != nil {
			return rerr // a retry: the last failure says more than "connecting"
		}
		return fmt.Errorf("%w to %s (since %s): the operator looks again shortly", ErrConnecting, conn, e.started.UTC().Format(time.RFC3339))
	case <-ctx.Done():
		return fmt.Errorf("connecting to %s: %w", conn, ctx.Err())
	}
}

// connect fills e; on failure it drops e from the pool and records the failure in the negative
// cache, so that a call after the retry time tries again.
func (p *Pool) connect(conn cassandrastore.Connection, k string, e *entry) {
	defer close(e.ready)
	session, store, err := p.open(conn)
	p.mu.Lock()
	closed := p.closed
	switch {
	case err != nil:
		if p.entries[k] == e {
			delete(p.entries, k)
		}
		if !closed {
			err = p.retry.failLocked(k, conn.String(), p.now(), err)
		}
	case !closed:
		p.retry.succeedLocked(k)
	}
	p.mu.Unlock()
	if err == nil && closed {
		cassandrastore.CloseSession(session, closeTimeout)
		session, store, err = nil, nil, ErrClosed
	}
	e.session, e.store, e.err = session, store, err
	var rerr *RetryError
	switch {
	case err == nil:
		p.log.Info("connected to the lock store", "target", conn.String())
	case errors.As(err, &rerr):
		p.log.Info("connecting to the lock store failed", "target", conn.String(), "failures", rerr.Failures, "retryAt", rerr.RetryAt, "err", conn.Redact(rerr.Err).Error())
	}
}

func (p *Pool) open(conn cassandrastore.Connection) (*gocql.Session, lock.Store, error) {
	cc, err := conn.ClusterConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", conn, err)
	}
	session, err := cassandrastore.CreateSession(cc) // a refused login wraps cassandrastore.ErrAuthentication
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to %s: %w", conn, err)
	}
	// Connection setup has its own timeouts; the schema statements get a generous bound.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// New checks the server before the schema: nothing is created on a Cassandra whose
	// lightweight transactions are unsafe for a lock (or that cannot be read at all).
	store, err := cassandrastore.New(ctx, session, conn.StoreOptions()...)
	ensure := p.ensureSchema && (p.schemaFor == nil || p.schemaFor(conn))
	if ensure && (err == nil || errors.Is(err, cassandrastore.ErrSchema)) {
		if err := cassandrastore.EnsureSchema(ctx, session, conn.Keyspace, p.replication); err != nil {
			// Without CREATE permission the schema may still exist; New says if it does not.
			p.log.Error(conn.Redact(err), "ensuring the lock schema", "target", conn.String())
		}
		if err != nil {
			store, err = cassandrastore.New(ctx, session, conn.StoreOptions()...)
		}
	}
	if err != nil {
		cassandrastore.CloseSession(session, closeTimeout)
		return nil, nil, fmt.Errorf("%s: %w", conn, err)
	}
	return session, store, nil
}

// sweepLocked removes entries (other than keep) unused for longer than the idle time and returns
// their sessions for closing outside the lock.
func (p *Pool) sweepLocked(keep string) []*gocql.Session {
	var stale []*gocql.Session
	cutoff := p.now().Add(-p.idle)
	for k, e := range p.entries {
		if k == keep || !e.used.Before(cutoff) {
			continue
		}
		select {
		case <-e.ready:
		default:
			continue // still connecting
		}
		delete(p.entries, k)
		if e.session != nil {
			stale = append(stale, e.session)
		}
	}
	return stale
}

// Len returns the number of pooled connections (including ones being set up).
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Close closes every session; later calls of Store fail with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	var sessions []*gocql.Session
	for k, e := range p.entries {
		select {
		case <-e.ready:
			if e.session != nil {
				sessions = append(sessions, e.session)
			}
		default:
			// Still connecting: its goroutine finishes on its own timeouts.
		}
		delete(p.entries, k)
	}
	p.mu.Unlock()
	closeAll(sessions)
}

func closeAll(sessions []*gocql.Session) {
	for _, s := range sessions {
		cassandrastore.CloseSession(s, closeTimeout)
	}
}
