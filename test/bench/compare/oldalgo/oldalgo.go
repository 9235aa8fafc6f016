package oldalgo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// Outcome is the result of one TryLock attempt (the old algorithm's three states).
type Outcome int

const (
	// Success: the thread holds the lock.
	Success Outcome = iota
	// AnotherThreadIsOwner: another thread's cell is in the main row.
	AnotherThreadIsOwner
	// ConcurrentAttempt: another thread was in the shadow row at the same time.
	ConcurrentAttempt
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "Success"
	case AnotherThreadIsOwner:
		return "AnotherThreadIsOwner"
	case ConcurrentAttempt:
		return "ConcurrentAttempt"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Backoffs of GetLock.
const (
	// OwnerBackoff bounds the random sleep after AnotherThreadIsOwner.
	OwnerBackoff = time.Second
	// CollisionBackoff times the attempt number bounds the random sleep after ConcurrentAttempt.
	CollisionBackoff = 50 * time.Millisecond
)

// DefaultLease is the TTL of the cells when WithLease is not given: the 3-minute TTL of the
// algorithm's production version (docs/design.md).
const DefaultLease = 3 * time.Minute

// ErrInvalid is returned by New for unusable arguments.
var ErrInvalid = errors.New("oldalgo: invalid argument")

// keyspaceName is the rule baton's own store applies: the keyspace is written into CQL unquoted.
var keyspaceName = regexp.MustCompile(batonv1.KeyspacePattern)

// EnsureSchema creates the main and shadow tables in keyspace, which must exist.
func EnsureSchema(ctx context.Context, session *gocql.Session, keyspace string) error {
	if !keyspaceName.MatchString(keyspace) {
		return fmt.Errorf("%w: keyspace %q", ErrInvalid, keyspace)
	}
	for _, table := range []string{"oldalgo_main", "oldalgo_shadow"} {
		stmt := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
			lock_id text, thread_id text, PRIMARY KEY (lock_id, thread_id)
		) WITH gc_grace_seconds = 60 AND comment = 'old algorithm: benchmark baseline only'`, keyspace, table)
		if err := session.Query(stmt).ExecContext(ctx); err != nil {
			return fmt.Errorf("oldalgo: creating table %s.%s: %w", keyspace, table, err)
		}
		if err := session.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("oldalgo: waiting for schema agreement: %w", err)
		}
	}
	return nil
}

// Option configures a Locker.
type Option func(*Locker)

// WithLease sets the TTL of the cells, rounded to whole seconds (at least one). The holder rewrites
// its main cell every TTL/2. Default DefaultLease.
func WithLease(d time.Duration) Option { return func(l *Locker) { l.ttl = d } }

// WithLogger sets the logger. Default: discard.
func WithLogger(log logr.Logger) Option { return func(l *Locker) { l.log = log } }

// Stats counts TryLock outcomes and store errors (other than those caused by the end of the
// caller's context) of one Locker.
type Stats struct {
	Success, AnotherThreadIsOwner, ConcurrentAttempt, Errors int64
}

// Locker takes locks for one thread ID. It is safe for concurrent use on different lock IDs.
type Locker struct {
	session *gocql.Session
	thread  string
	ttl     time.Duration
	log     logr.Logger

	qMain, qShadow, qInsMain, qInsShadow, qDelMain, qDelShadow string
	counts                                                     [4]atomic.Int64
}

// New returns a Locker for threadID on the tables EnsureSchema created in keyspace.
func New(session *gocql.Session, keyspace, threadID string, opts ...Option) (*Locker, error) {
	if session == nil {
		return nil, fmt.Errorf("%w: session is nil", ErrInvalid)
	}
	if !keyspaceName.MatchString(keyspace) {
		return nil, fmt.Errorf("%w: keyspace %q", ErrInvalid, keyspace)
	}
	if threadID == "" {
		return nil, fmt.Errorf("%w: empty thread ID", ErrInvalid)
	}
	l := &Locker{session: session, thread: threadID, ttl: DefaultLease, log: logr.Discard()}
	for _, o := range opts {
		o(l)
	}
	if l.ttl.Round(time.Second) < time.Second {
		return nil, fmt.Errorf("%w: lease %v is under one second", ErrInvalid, l.ttl)
	}
	l.ttl = l.ttl.Round(time.Second)
	l.qMain = fmt.Sprintf(`SELECT thread_id FROM %s.oldalgo_main WHERE lock_id = ?`, keyspace)
	l.qShadow = fmt.Sprintf(`SELECT thread_id FROM %s.oldalgo_shadow WHERE lock_id = ?`, keyspace)
	l.qInsMain = fmt.Sprintf(`INSERT INTO %s.oldalgo_main (lock_id, thread_id) VALUES (?, ?) USING TTL ?`, keyspace)
	l.qInsShadow = fmt.Sprintf(`INSERT INTO %s.oldalgo_shadow (lock_id, thread_id) VALUES (?, ?) USING TTL ?`, keyspace)
	l.qDelMain = fmt.Sprintf(`DELETE FROM %s.oldalgo_main WHERE lock_id = ? AND thread_id = ?`, keyspace)
	l.qDelShadow = fmt.Sprintf(`DELETE FROM %s.oldalgo_shadow WHERE lock_id = ? AND thread_id = ?`, keyspace)
	return l, nil
}

// ThreadID returns the thread ID this Locker writes.
func (l *Locker) ThreadID() string { return l.thread }

// Lease returns the TTL of the cells.
func (l *Locker) Lease() time.Duration { return l.ttl }

// Stats returns the outcome counts so far.
func (l *Locker) Stats() Stats {
	return Stats{
		Success: l.counts[Success].Load(), AnotherThreadIsOwner: l.counts[AnotherThreadIsOwner].Load(),
		ConcurrentAttempt: l.counts[ConcurrentAttempt].Load(), Errors: l.counts[3].Load(),
	}
}

// GetLock blocks until the lock is held or ctx ends.
func (l *Locker) GetLock(ctx context.Context, lockID string) (*Lock, error) {
	attempt := 1
	for {
		lk, outcome, err := l.TryLock(ctx, lockID)
		var pause time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil, fmt.Errorf("oldalgo: lock %s: %w", lockID, ctx.Err())
			}
			l.log.V(1).Info("attempt failed; retrying", "lock", lockID, "err", err.Error())
			pause = randUpTo(CollisionBackoff * time.Duration(attempt))
		case outcome == Success:
			return lk, nil
		case outcome == AnotherThreadIsOwner:
			pause = randUpTo(OwnerBackoff)
		case outcome == ConcurrentAttempt:
			pause = randUpTo(CollisionBackoff * time.Duration(attempt))
			attempt++
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("oldalgo: lock %s: %w", lockID, ctx.Err())
		case <-t.C:
		}
	}
}

// TryLock makes one attempt and returns the held lock on Success.
func (l *Locker) TryLock(ctx context.Context, lockID string) (*Lock, Outcome, error) {
	outcome, err := l.try(ctx, lockID)
	if err != nil {
		if ctx.Err() == nil {
			l.counts[3].Add(1)
		}
		return nil, 0, err
	}
	l.counts[outcome].Add(1)
	if outcome != Success {
		return nil, outcome, nil
	}
	lk := &Lock{l: l, lockID: lockID, stop: make(chan struct{}), exited: make(chan struct{})}
	go lk.refresh()
	return lk, Success, nil
}

func (l *Locker) try(ctx context.Context, lockID string) (Outcome, error) {
	ttl := int(l.ttl / time.Second)
	// 1-6. The main row decides when it is taken.
	owners, err := l.cells(ctx, l.qMain, lockID)
	if err != nil {
		return 0, err
	}
	if len(owners) == 1 && owners[0] == l.thread {
		return Success, nil
	}
	if len(owners) > 0 {
		return AnotherThreadIsOwner, nil
	}
	// 7-8. Write our cell into the shadow row and read the row back.
	if err := l.exec(ctx, l.qInsShadow, lockID, l.thread, ttl); err != nil {
		return 0, err
	}
	outcome, err := l.contend(ctx, lockID, ttl)
	// 12, 14. Our shadow cell goes in every case.
	if derr := l.exec(context.WithoutCancel(ctx), l.qDelShadow, lockID, l.thread); derr != nil && err == nil {
		l.log.V(1).Info("deleting shadow cell failed; it expires with its TTL", "lock", lockID, "err", derr.Error())
	}
	return outcome, err
}

// contend is steps 9-11: alone in the shadow row and the main row still empty → take the lock.
func (l *Locker) contend(ctx context.Context, lockID string, ttl int) (Outcome, error) {
	shadow, err := l.cells(ctx, l.qShadow, lockID)
	if err != nil {
		return 0, err
	}
	if len(shadow) != 1 || shadow[0] != l.thread {
		return ConcurrentAttempt, nil
	}
	owners, err := l.cells(ctx, l.qMain, lockID)
	if err != nil {
		return 0, err
	}
	if len(owners) > 0 {
		return ConcurrentAttempt, nil
	}
	if err := l.exec(ctx, l.qInsMain, lockID, l.thread, ttl); err != nil {
		return 0, err
	}
	return Success, nil
}

func (l *Locker) cells(ctx context.Context, q, lockID string) ([]string, error) {
	iter := l.session.Query(q, lockID).Consistency(gocql.Quorum).Idempotent(true).IterContext(ctx)
	var (
		out []string
		id  string
	)
	for iter.Scan(&id) {
		out = append(out, id)
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("oldalgo: reading row of lock %s: %w", lockID, err)
	}
	return out, nil
}

func (l *Locker) exec(ctx context.Context, q string, args ...any) error {
	if err := l.session.Query(q, args...).Consistency(gocql.Quorum).Idempotent(true).ExecContext(ctx); err != nil {
		return fmt.Errorf("oldalgo: writing lock %v: %w", args[0], err)
	}
	return nil
}

// Lock is a held lock. Its main cell is rewritten every TTL/2 until Release or Abandon.
type Lock struct {
	l      *Locker
	lockID string
	stop   chan struct{}
	exited chan struct{}
	once   sync.Once
}

// LockID returns the lock's ID.
func (k *Lock) LockID() string { return k.lockID }

func (k *Lock) refresh() {
	defer close(k.exited)
	t := time.NewTicker(k.l.ttl / 2)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), k.l.ttl/2)
			err := k.l.exec(ctx, k.l.qInsMain, k.lockID, k.l.thread, int(k.l.ttl/time.Second))
			cancel()
			if err != nil {
				// The old algorithm has no self-fencing: the holder carries on whether or not this worked.
				k.l.log.V(1).Info("rewriting main cell failed", "lock", k.lockID, "err", err.Error())
			}
		}
	}
}

// halt stops the refresher and waits for it, so that no rewrite can follow a delete.
func (k *Lock) halt() {
	k.once.Do(func() { close(k.stop) })
	<-k.exited
}

// Release stops rewriting the main cell and deletes it.
func (k *Lock) Release(ctx context.Context) error {
	k.halt()
	return k.l.exec(ctx, k.l.qDelMain, k.lockID, k.l.thread)
}

// Abandon stops rewriting the main cell without deleting it, as if the holder died: the lock frees
// itself when the cell's TTL runs out.
func (k *Lock) Abandon() { k.halt() }

func randUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}
