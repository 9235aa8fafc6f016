package lwtlock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// Defaults of the options.
const (
	DefaultLease        = 15 * time.Second
	DefaultPollInterval = 125 * time.Millisecond
)

var (
	// ErrInvalid is returned by New for unusable arguments.
	ErrInvalid = errors.New("lwtlock: invalid argument")
	// ErrLeaseExpired is the loss reason when the holder could not renew in time.
	ErrLeaseExpired = errors.New("lwtlock: lease expired before it could be renewed")
	// ErrLost is the loss reason when the row no longer names this holder.
	ErrLost = errors.New("lwtlock: row no longer names this holder")
	// ErrReleased is the reason reported by a released lease.
	ErrReleased = errors.New("lwtlock: released")
	// ErrAbandoned is the reason reported by an abandoned lease.
	ErrAbandoned = errors.New("lwtlock: abandoned")
)

// keyspaceName is the rule baton's own store applies: the keyspace is written into CQL unquoted.
var keyspaceName = regexp.MustCompile(batonv1.KeyspacePattern)

// EnsureSchema creates the lock table in keyspace, which must exist.
func EnsureSchema(ctx context.Context, session *gocql.Session, keyspace string) error {
	if !keyspaceName.MatchString(keyspace) {
		return fmt.Errorf("%w: keyspace %q", ErrInvalid, keyspace)
	}
	stmt := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.lwt_lock (
		lock_id text PRIMARY KEY, owner text, version bigint
	) WITH comment = 'plain LWT lock: benchmark baseline only'`, keyspace)
	if err := session.Query(stmt).ExecContext(ctx); err != nil {
		return fmt.Errorf("lwtlock: creating table %s.lwt_lock: %w", keyspace, err)
	}
	if err := session.AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("lwtlock: waiting for schema agreement: %w", err)
	}
	return nil
}

// Option configures a Locker.
type Option func(*Locker)

// WithLease sets the lease: a holder renews every lease/3 and a contender takes over a row it has
// seen unchanged for this long. Default DefaultLease.
func WithLease(d time.Duration) Option { return func(l *Locker) { l.lease = d } }

// WithPollInterval sets how often a contender re-reads a held row. Default DefaultPollInterval.
func WithPollInterval(d time.Duration) Option { return func(l *Locker) { l.poll = d } }

// WithLogger sets the logger. Default: discard.
func WithLogger(log logr.Logger) Option { return func(l *Locker) { l.log = log } }

// Locker takes locks for one owner.
type Locker struct {
	session *gocql.Session
	owner   string
	lease   time.Duration
	poll    time.Duration
	timeout time.Duration
	log     logr.Logger

	qRead, qInsert, qUpdate string
}

// New returns a Locker for owner on the table EnsureSchema created in keyspace.
func New(session *gocql.Session, keyspace, owner string, opts ...Option) (*Locker, error) {
	if session == nil {
		return nil, fmt.Errorf("%w: session is nil", ErrInvalid)
	}
	if !keyspaceName.MatchString(keyspace) {
		return nil, fmt.Errorf("%w: keyspace %q", ErrInvalid, keyspace)
	}
	if owner == "" {
		return nil, fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	l := &Locker{session: session, owner: owner, lease: DefaultLease, poll: DefaultPollInterval, log: logr.Discard()}
	for _, o := range opts {
		o(l)
	}
	if l.lease < time.Second || l.poll <= 0 {
		return nil, fmt.Errorf("%w: lease %v (at least 1s) and poll interval %v (positive)", ErrInvalid, l.lease, l.poll)
	}
	l.timeout = min(2*time.Second, l.lease/3)
	l.qRead = fmt.Sprintf(`SELECT owner, version FROM %s.lwt_lock WHERE lock_id = ?`, keyspace)
	l.qInsert = fmt.Sprintf(`INSERT INTO %s.lwt_lock (lock_id, owner, version) VALUES (?, ?, ?) IF NOT EXISTS`, keyspace)
	l.qUpdate = fmt.Sprintf(`UPDATE %s.lwt_lock SET owner = ?, version = ? WHERE lock_id = ? IF version = ?`, keyspace)
	return l, nil
}

// Owner returns the owner this Locker writes.
func (l *Locker) Owner() string { return l.owner }

// row is the lock's row; version grows with every write and identifies its state.
type row struct {
	owner   string
	version int64
}

func (l *Locker) read(ctx context.Context, lockID string, cons gocql.Consistency) (row, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	var r row
	err := l.session.Query(l.qRead, lockID).Consistency(cons).Idempotent(true).ScanContext(ctx, &r.owner, &r.version)
	if errors.Is(err, gocql.ErrNotFound) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, fmt.Errorf("lwtlock: reading lock %s: %w", lockID, err)
	}
	return r, true, nil
}

// cas writes next if the row is still prev (absent when exists is false). An error means the
// outcome is unknown.
func (l *Locker) cas(ctx context.Context, lockID string, prev row, exists bool, next row) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	var q *gocql.Query
	if exists {
		q = l.session.Query(l.qUpdate, next.owner, next.version, lockID, prev.version)
	} else {
		q = l.session.Query(l.qInsert, lockID, next.owner, next.version)
	}
	applied, err := q.Consistency(gocql.Quorum).SerialConsistency(gocql.Serial).Idempotent(false).
		MapScanCASContext(ctx, map[string]any{})
	if err != nil {
		return false, fmt.Errorf("lwtlock: conditional write to lock %s: %w", lockID, err)
	}
	return applied, nil
}

// settle finds out with a SERIAL read whether a write of unknown outcome applied.
func (l *Locker) settle(ctx context.Context, lockID string, next row) (applied bool, cur row, ok bool, err error) {
	cur, ok, err = l.read(ctx, lockID, gocql.Serial)
	return err == nil && ok && cur == next, cur, ok, err
}

// Acquire blocks until it holds lockID or ctx ends.
func (l *Locker) Acquire(ctx context.Context, lockID string) (*Lease, error) {
	var (
		seen   row
		seenAt time.Time
		seenOK bool
	)
	for {
		r, ok, err := l.read(ctx, lockID, gocql.Quorum)
		if err == nil {
			now := time.Now()
			take := !ok || r.owner == ""
			if !take {
				// Expiry by observation: the same row for a full lease on our own clock.
				if !seenOK || seen != r {
					seen, seenAt, seenOK = r, now, true
				}
				take = now.Sub(seenAt) >= l.lease
			}
			if take {
				next := row{owner: l.owner, version: r.version + 1}
				sent := time.Now()
				applied, err := l.cas(ctx, lockID, r, ok, next)
				if err != nil {
					l.log.V(1).Info("claim outcome unknown, settling", "lock", lockID, "err", err.Error())
					applied, _, _, err = l.settle(ctx, lockID, next)
				}
				if err == nil && applied {
					return l.start(lockID, next, sent), nil
				}
			}
		} else {
			l.log.V(1).Info("read failed while waiting", "lock", lockID, "err", err.Error())
		}
		t := time.NewTimer(l.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("lwtlock: lock %s: %w", lockID, ctx.Err())
		case <-t.C:
		}
	}
}

// Lease is a held lock, renewed in the background until it is released, abandoned or lost.
type Lease struct {
	l      *Locker
	lockID string
	done   chan struct{}
	stop   chan struct{}
	exited chan struct{}
	once   sync.Once

	mu         sync.Mutex
	cur        row // last row we know we wrote
	pending    *write
	validUntil time.Time
	err        error
}

type write struct {
	next row
	sent time.Time
}

func (l *Locker) start(lockID string, r row, sent time.Time) *Lease {
	s := &Lease{
		l: l, lockID: lockID, cur: r, validUntil: sent.Add(l.lease - l.lease/10),
		done: make(chan struct{}), stop: make(chan struct{}), exited: make(chan struct{}),
	}
	go s.run()
	return s
}

// LockID returns the lock's ID.
func (s *Lease) LockID() string { return s.lockID }

// Version returns the row version this lease last wrote (it grows with every renewal).
func (s *Lease) Version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.version
}

// Done is closed when the lease ends.
func (s *Lease) Done() <-chan struct{} { return s.done }

// Err returns nil while the lease is held, else why it ended.
func (s *Lease) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Lease) lose(reason error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = reason
		close(s.done)
	}
}

func (s *Lease) run() {
	defer close(s.exited)
	renew := time.NewTicker(s.l.lease / 3)
	defer renew.Stop()
	for {
		s.mu.Lock()
		left := time.Until(s.validUntil)
		s.mu.Unlock()
		fence := time.NewTimer(left)
		select {
		case <-s.stop:
			fence.Stop()
			return
		case <-fence.C:
			s.lose(ErrLeaseExpired)
			return
		case <-renew.C:
			fence.Stop()
			if err := s.renew(); err != nil {
				s.lose(err)
				return
			}
		}
	}
}

// renew extends the lease once; it returns the loss reason when the row is someone else's.
func (s *Lease) renew() error {
	ctx := context.Background()
	s.mu.Lock()
	cur, pending := s.cur, s.pending
	s.mu.Unlock()
	if pending != nil {
		applied, now, ok, err := s.l.settle(ctx, s.lockID, pending.next)
		switch {
		case err != nil:
			return nil // try again at the next tick; the fence ends the lease if this goes on
		case applied:
			s.mu.Lock()
			s.cur, s.pending, s.validUntil = pending.next, nil, pending.sent.Add(s.l.lease-s.l.lease/10)
			s.mu.Unlock()
			return nil
		case !ok || now != cur:
			return fmt.Errorf("%w: now %q version %d", ErrLost, now.owner, now.version)
		}
		s.mu.Lock()
		s.pending = nil
		s.mu.Unlock()
	}
	w := write{next: row{owner: s.l.owner, version: cur.version + 1}, sent: time.Now()}
	applied, err := s.l.cas(ctx, s.lockID, cur, true, w.next)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		s.pending = &w
		return nil
	case !applied:
		return fmt.Errorf("%w: version %d was overwritten", ErrLost, cur.version)
	}
	s.cur, s.validUntil = w.next, w.sent.Add(s.l.lease-s.l.lease/10)
	return nil
}

func (s *Lease) halt() {
	s.once.Do(func() { close(s.stop) })
	<-s.exited
}

// Abandon stops renewing without releasing, as if the holder died: contenders take over once they
// have seen the row unchanged for a full lease.
func (s *Lease) Abandon() {
	s.halt()
	s.lose(ErrAbandoned)
}

// Release stops claiming the lock and gives the row back so that a contender may claim it at once.
// Releasing a lost lease is not an error.
func (s *Lease) Release(ctx context.Context) error {
	s.halt()
	s.mu.Lock()
	lost := s.err != nil
	cur, pending := s.cur, s.pending
	s.mu.Unlock()
	s.lose(ErrReleased)
	if lost {
		return nil
	}
	for {
		if pending != nil {
			applied, now, ok, err := s.l.settle(ctx, s.lockID, pending.next)
			switch {
			case err != nil:
			case applied:
				cur, pending = pending.next, nil
			case !ok || now != cur:
				return nil // not ours any more
			default:
				pending = nil
			}
		}
		if pending == nil {
			next := row{version: cur.version + 1}
			applied, err := s.l.cas(ctx, s.lockID, cur, true, next)
			if err == nil {
				if !applied {
					s.l.log.V(1).Info("release found the row changed", "lock", s.lockID)
				}
				return nil
			}
			pending = &write{next: next}
		}
		t := time.NewTimer(s.l.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lwtlock: releasing lock %s: %w", s.lockID, ctx.Err())
		case <-t.C:
		}
	}
}
