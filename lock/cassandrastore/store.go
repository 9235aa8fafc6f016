package cassandrastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/lock"
)

// Option configures a Store.
type Option func(*Store)

// WithKeyspace sets the keyspace holding baton's tables. Default "baton".
func WithKeyspace(ks string) Option { return func(s *Store) { s.keyspace = ks } }

// WithConsistency sets the consistency of reads, queue writes and the commit phase of lightweight
// transactions: Quorum (default), LocalQuorum, EachQuorum or All.
func WithConsistency(c gocql.Consistency) Option { return func(s *Store) { s.cons = c } }

// WithSerialConsistency sets the consistency of the Paxos phase of lightweight transactions and of
// linearizable reads: Serial (default) or LocalSerial (only when every contender of a lock is in
// one data centre).
func WithSerialConsistency(c gocql.Consistency) Option { return func(s *Store) { s.serial = c } }

// Store is a lock.Store on Cassandra. It is safe for concurrent use.
type Store struct {
	session  *gocql.Session
	keyspace string
	cons     gocql.Consistency
	serial   gocql.Consistency

	wantCluster string // WithClusterName
	cluster     string // cluster_name of the cluster reached

	qLoad, qInsert, qUpdate, qEnqueue, qDequeue, qQueue string
	hints                                               bool // the queue table has the hint column

	stampMu   sync.Mutex
	lastStamp int64 // the last write timestamp given to a queue write (writeStamp)
}

var _ lock.Store = (*Store)(nil)

// New returns a Store on session after checking the options, the server and the schema, in that
// order:
//   - every node (system.local and system.peers, read once) must run a Cassandra version whose
//     lightweight transactions are linearizable (see MinSafeVersions), and the answering node
//     must not run a paxos_variant without linearizable reads: otherwise ErrUnsafeServer, also
//     for a version string that cannot be read as a version;
//   - with WithClusterName, the cluster must carry that name: otherwise ErrClusterMismatch;
//   - the keyspace must hold a schema this build understands (see EnsureSchema): otherwise
//     ErrSchemaMissing or ErrSchema.
//
// The server is checked only here: nodes upgraded or replaced later are not re-checked, and a
// server started with -Dcassandra.unsafe.disable-serial-reads-linearizability=true (Cassandra 3.0,
// 3.11 and 4.0) cannot be detected from a client.
func New(ctx context.Context, session *gocql.Session, opts ...Option) (*Store, error) {
	if session == nil {
		return nil, errors.New("cassandrastore: session is nil")
	}
	s := &Store{session: session, keyspace: DefaultKeyspace, cons: gocql.Quorum, serial: gocql.Serial}
	for _, o := range opts {
		o(s)
	}
	if err := validateKeyspace(s.keyspace); err != nil {
		return nil, err
	}
	switch s.cons {
	case gocql.Quorum, gocql.LocalQuorum, gocql.EachQuorum, gocql.All:
	default:
		return nil, fmt.Errorf("cassandrastore: consistency %v is too weak for a lock: use QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL", s.cons)
	}
	if s.serial != gocql.Serial && s.serial != gocql.LocalSerial {
		return nil, fmt.Errorf("cassandrastore: serial consistency %v must be SERIAL or LOCAL_SERIAL", s.serial)
	}
	if err := s.checkServer(ctx); err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, session, s.keyspace, s.cons); err != nil {
		return nil, err
	}
	hints, err := hasHintColumn(ctx, session, s.keyspace)
	if err != nil {
		return nil, err
	}
	ks := s.keyspace
	const cols = `owner, fencing_token, version, lease_ms, revoked, granted_at, renewed_at`
	s.qLoad = fmt.Sprintf(`SELECT %s FROM %s.lock_owners WHERE lock_id = ?`, cols, ks)
	s.qInsert = fmt.Sprintf(`INSERT INTO %s.lock_owners (lock_id, %s) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS`, ks, cols)
	s.qUpdate = fmt.Sprintf(`UPDATE %s.lock_owners SET owner = ?, fencing_token = ?, version = ?, lease_ms = ?, revoked = ?, granted_at = ?, renewed_at = ?
		WHERE lock_id = ? IF version = ? AND owner = ? AND fencing_token = ? AND revoked = ? AND lease_ms = ?`, ks)
	// A keyspace whose queue table has no hint column yet (created by an earlier release and not
	// upgraded by EnsureSchema) still works: its waiters are not told, they poll.
	s.qEnqueue = fmt.Sprintf(`INSERT INTO %s.lock_queue (lock_id, enqueued, owner) VALUES (?, ?, ?) USING TTL ?`, ks)
	s.qQueue = fmt.Sprintf(`SELECT enqueued, owner FROM %s.lock_queue WHERE lock_id = ? AND enqueued >= ? LIMIT ?`, ks)
	if hints {
		s.qEnqueue = fmt.Sprintf(`INSERT INTO %s.lock_queue (lock_id, enqueued, owner, hint) VALUES (?, ?, ?, ?) USING TTL ?`, ks)
		// The hint column's write time changes with every write of the entry (a refresh rewrites
		// the hint too): lock.QueueEntry's Written stamp. It is only compared with itself.
		s.qQueue = fmt.Sprintf(`SELECT enqueued, owner, hint, WRITETIME(hint) FROM %s.lock_queue WHERE lock_id = ? AND enqueued >= ? LIMIT ?`, ks)
	}
	s.hints = hints
	s.qDequeue = fmt.Sprintf(`DELETE FROM %s.lock_queue WHERE lock_id = ? AND enqueued = ? AND owner = ?`, ks)
	return s, nil
}

// query returns the statement stmt on lockID's partition. Its routing key is given (the partition
// key is lock_id alone, a text, whose routing key is its bytes), so the driver never prepares a
// statement on some connection just to learn it: on a hung node that would stall the request
// before any coordinator is chosen, where no host policy can see it.
func (s *Store) query(stmt, lockID string, args ...any) *gocql.Query {
	return s.session.Query(stmt, args...).RoutingKey([]byte(lockID))
}

// Load implements lock.Store. A linearizable load is a SERIAL (or LOCAL_SERIAL) read, which
// completes or supersedes any Paxos round left unfinished by a write of unknown outcome.
func (s *Store) Load(ctx context.Context, lockID string, linearizable bool) (lock.Record, bool, error) {
	cons := s.cons
	if linearizable {
		cons = s.serial
	}
	m := make(map[string]any)
	err := s.query(s.qLoad, lockID, lockID).Consistency(cons).Idempotent(true).MapScanContext(ctx, m)
	if errors.Is(err, gocql.ErrNotFound) {
		return lock.Record{}, false, nil
	}
	if err != nil {
		return lock.Record{}, false, fmt.Errorf("cassandrastore: loading owner record: %w", err)
	}
	return recordFrom(m), true, nil
}

// CompareAndSwap implements lock.Store with a lightweight transaction.
func (s *Store) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	args := []any{next.Owner, next.Token, next.Version, next.Lease.Milliseconds(), next.Revoked, timestamp(next.GrantedAt), timestamp(next.RenewedAt)}
	var q *gocql.Query
	if prev.Version == 0 {
		q = s.query(s.qInsert, lockID, append([]any{lockID}, args...)...)
	} else {
		q = s.query(s.qUpdate, lockID, append(args, lockID, prev.Version, prev.Owner, prev.Token, prev.Revoked, prev.Lease.Milliseconds())...)
	}
	m := make(map[string]any)
	applied, err := q.Consistency(s.cons).SerialConsistency(s.serial).Idempotent(false).MapScanCASContext(ctx, m)
	if err != nil {
		return false, lock.Record{}, false, fmt.Errorf("%w: cassandrastore: %w", lock.ErrUnknownOutcome, err)
	}
	if applied {
		return true, lock.Record{}, false, nil
	}
	// Not applied: Cassandra returns the current values of the columns named in the condition (all
	// of them for IF NOT EXISTS), or nothing when the row does not exist.
	if _, ok := m["version"]; !ok {
		return false, lock.Record{}, false, nil
	}
	return false, recordFrom(m), true, nil
}

// Enqueue implements lock.Store.
func (s *Store) Enqueue(ctx context.Context, lockID string, e lock.QueueEntry, ttl time.Duration) error {
	secs := int(ttl.Round(time.Second) / time.Second)
	if secs < 1 {
		return fmt.Errorf("cassandrastore: queue entry TTL %v is under one second", ttl)
	}
	args := []any{lockID, e.Enqueued, e.Owner, secs}
	if s.hints {
		args = []any{lockID, e.Enqueued, e.Owner, e.Hint, secs}
	}
	err := s.query(s.qEnqueue, lockID, args...).Consistency(s.cons).Idempotent(true).
		WithTimestamp(s.writeStamp()).ExecContext(ctx)
	if err != nil {
		return fmt.Errorf("cassandrastore: writing queue entry: %w", err)
	}
	return nil
}

// writeStamp returns the timestamp of a queue write or removal of this Store's own: its wall clock
// in microseconds, never below the previous one plus one, so that its own writes of one entry are
// ordered as it sent them even when they fall in one microsecond or the wall clock steps back.
// (Cassandra reconciles the cells of one entry by these client-side timestamps: the last write
// wins, and a removal wins over every write with the same or an earlier timestamp.)
func (s *Store) writeStamp() int64 {
	s.stampMu.Lock()
	defer s.stampMu.Unlock()
	s.lastStamp = max(time.Now().UnixMicro(), s.lastStamp+1)
	return s.lastStamp
}

// Dequeue implements lock.Store. An entry with a Written stamp (read from the queue: another
// owner's, removed because its waiter looks dead) is removed as the write it was seen with: the
// removal carries that write's own timestamp (USING TIMESTAMP, set on the request), so it removes
// that write and nothing later, whatever the remover's clock says. A waiter that was alive after all
// and wrote its entry again keeps it; and a removal is never lost to a remover's clock that runs
// behind the waiter's. Without a stamp (our own entry, or a keyspace without the hint column whose
// write times this store reads) the removal carries this Store's own write timestamp.
func (s *Store) Dequeue(ctx context.Context, lockID string, e lock.QueueEntry) error {
	stamp := e.Written
	if stamp == 0 {
		stamp = s.writeStamp()
	}
	err := s.query(s.qDequeue, lockID, lockID, e.Enqueued, e.Owner).Consistency(s.cons).Idempotent(true).
		WithTimestamp(stamp).ExecContext(ctx)
	if err != nil {
		return fmt.Errorf("cassandrastore: deleting queue entry: %w", err)
	}
	return nil
}

// Queue implements lock.Store. A bounded read (from > 0) is a clustering slice: Cassandra starts
// it at from and never reads the tombstones that removed entries left before it.
func (s *Store) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	iter := s.query(s.qQueue, lockID, lockID, from, limit).Consistency(s.cons).Idempotent(true).IterContext(ctx)
	var (
		out  []lock.QueueEntry
		e    lock.QueueEntry
		dest = []any{&e.Enqueued, &e.Owner}
	)
	if s.hints {
		dest = append(dest, &e.Hint, &e.Written)
	}
	for iter.Scan(dest...) {
		out = append(out, e)
		e.Hint, e.Written = "", 0
	}
	if err := iter.Close(); err != nil {
		return nil, fmt.Errorf("cassandrastore: reading queue: %w", err)
	}
	return out, nil
}

func timestamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func recordFrom(m map[string]any) lock.Record {
	var r lock.Record
	r.Owner, _ = m["owner"].(string)
	r.Token, _ = m["fencing_token"].(int64)
	r.Version, _ = m["version"].(int64)
	if ms, ok := m["lease_ms"].(int64); ok {
		r.Lease = time.Duration(ms) * time.Millisecond
	}
	r.Revoked, _ = m["revoked"].(bool)
	r.GrantedAt, _ = m["granted_at"].(time.Time)
	r.RenewedAt, _ = m["renewed_at"].(time.Time)
	return r
}
