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
	now          func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
}

type entry struct {
	ready   chan struct{} // closed once session/store/err are set
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

// WithLogger sets the logger.
func WithLogger(l logr.Logger) Option { return func(p *Pool) { p.log = l } }

// New returns an empty pool.
func New(opts ...Option) *Pool {
	p := &Pool{log: logr.Discard(), idle: DefaultIdle, now: time.Now, entries: map[string]*entry{}}
	for _, o := range opts {
		o(p)
	}
	return p
}

// ErrClosed is returned by Store after Close.
var ErrClosed = errors.New("storepool: closed")

// Store returns the lock store of conn, connecting on first use (conn.ClusterName, when set, is
// checked then). A failed connection is not kept: the next call tries again. Concurrent calls for
// the same connection share one attempt.
func (p *Pool) Store(ctx context.Context, conn cassandrastore.Connection) (lock.Store, error) {
	k := key(conn)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	stale := p.sweepLocked(k)
	e, ok := p.entries[k]
	if !ok {
		e = &entry{ready: make(chan struct{})}
		p.entries[k] = e
		go p.connect(conn, k, e)
	}
	e.used = p.now()
	p.mu.Unlock()
	closeAll(stale)

	select {
	case <-e.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("connecting to %s: %w", conn, ctx.Err())
	}
	if e.err != nil {
		return nil, e.err
	}
	return e.store, nil
}

// connect fills e; on failure it drops e from the pool so that the next call retries.
func (p *Pool) connect(conn cassandrastore.Connection, k string, e *entry) {
	defer close(e.ready)
	session, store, err := p.open(conn)
	p.mu.Lock()
	closed := p.closed
	if err != nil && p.entries[k] == e {
		delete(p.entries, k)
	}
	p.mu.Unlock()
	if err == nil && closed {
		cassandrastore.CloseSession(session, closeTimeout)
		session, store, err = nil, nil, ErrClosed
	}
	e.session, e.store, e.err = session, store, err
	if err == nil {
		p.log.Info("connected to the lock store", "target", conn.String())
	}
}

func (p *Pool) open(conn cassandrastore.Connection) (*gocql.Session, lock.Store, error) {
	cc, err := conn.ClusterConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", conn, err)
	}
	session, err := cc.CreateSession()
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
