package cassandrastore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// SchemaVersion is the version of the tables this package reads and writes.
const SchemaVersion = 1

// DefaultKeyspace is the keyspace used when none is given.
const DefaultKeyspace = "baton"

// DefaultReplication is the keyspace replication EnsureSchema uses when none is given: fine for one
// node, too weak for production (use NetworkTopologyStrategy with 3 replicas per data centre).
const DefaultReplication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"

// QueueGCGraceSeconds is the lock_queue table's gc_grace_seconds: how long Cassandra keeps the
// tombstones of finished waiters (one per dequeue, one per expired entry) that every queue read has
// to skip. It is short because a queue entry that comes back after a missed delete carries its
// own TTL (seconds) and ages out by itself; the queue decides fairness, never safety. The owner
// table keeps Cassandra's default: it has no deletes and no TTLs.
const QueueGCGraceSeconds = 60

// SpeculativeRetry is the speculative_retry of both lock tables: a QUORUM read is sent to one
// replica more than the quorum at once and is answered by the first quorum, so that a hung or
// dead replica that its coordinator has not yet marked down costs it nothing (issue 22). With the
// default ('99p') a coordinator asks only a quorum and turns to the third replica after a latency
// learnt from its own reads, which a node that coordinated few reads of the table has not learnt:
// its reads waited for the hung replica past every deadline of the lock. The tables are tiny and
// read a few times a second per waiter, so the extra replica read costs little. Lightweight
// transactions and SERIAL reads (Paxos) always ask every live replica and are not affected.
const SpeculativeRetry = "ALWAYS"

// ErrSchema is returned when the keyspace lacks baton's tables or holds a newer schema version.
var ErrSchema = errors.New("cassandrastore: schema")

// ErrSchemaMissing (which is also ErrSchema) is returned when the keyspace, its tables or its
// schema version cannot be read yet: worth waiting for whoever runs EnsureSchema.
var ErrSchemaMissing = fmt.Errorf("%w not created yet", ErrSchema)

// KeyspacePattern is what a keyspace of baton may be called: a letter, then up to 47 letters,
// digits or underscores (Cassandra's own limit is 48 characters). The store writes the name into
// CQL, so nothing else is accepted. api/v1's KeyspacePattern is the same rule (its tests say so).
const KeyspacePattern = `^[a-zA-Z][a-zA-Z0-9_]{0,47}$`

var keyspaceName = regexp.MustCompile(KeyspacePattern)

func validateKeyspace(ks string) error {
	if !keyspaceName.MatchString(ks) {
		return fmt.Errorf("cassandrastore: keyspace %q must be 1-48 letters, digits or underscores, starting with a letter", ks)
	}
	return nil
}

// SchemaStatements returns the CQL statements EnsureSchema executes, in order, to create keyspace
// (with the CQL replication map replication) and baton's tables: the one source of the schema for
// EnsureSchema and for whoever prints it for a DBA (baton schema). SchemaVersionStatement is the
// statement that records the version afterwards. Each statement is a single CQL statement without
// a trailing semicolon. It checks the keyspace name (KeyspacePattern) but not the replication map,
// which goes into the CQL as given: the caller must build it from checked parts. What it does not
// include: the upgrades of tables made by earlier releases (EnsureSchema makes them after these
// statements; on a new keyspace they change nothing).
func SchemaStatements(keyspace, replication string) ([]string, error) {
	if err := validateKeyspace(keyspace); err != nil {
		return nil, err
	}
	return schemaStatements(keyspace, replication), nil
}

// SchemaVersionStatement returns the lightweight transaction that records SchemaVersion in
// keyspace's schema_version table if no version is recorded there yet. EnsureSchema executes it
// last; it leaves a recorded version alone (EnsureSchema then refuses a newer one).
func SchemaVersionStatement(keyspace string) (string, error) {
	if err := validateKeyspace(keyspace); err != nil {
		return "", err
	}
	return schemaVersionStatement(keyspace), nil
}

func schemaVersionStatement(ks string) string {
	return fmt.Sprintf(`INSERT INTO %s.schema_version (component, version) VALUES ('lock', %d) IF NOT EXISTS`, ks, SchemaVersion)
}

func schemaStatements(ks, replication string) []string {
	return []string{
		fmt.Sprintf(`CREATE KEYSPACE IF NOT EXISTS %s WITH replication = %s`, ks, replication),
		// Written only by lightweight transactions; no TTL, no deletes (package lock, rules 1 and 2).
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.lock_owners (
			lock_id text PRIMARY KEY,
			owner text,
			fencing_token bigint,
			version bigint,
			lease_ms bigint,
			revoked boolean,
			granted_at timestamp,
			renewed_at timestamp
		) WITH speculative_retry = '%s'
		  AND comment = 'baton lock owner records: written only by LWT'`, ks, SpeculativeRetry),
		// Plain writes with TTL; tombstones of finished waiters are purged quickly (see
		// QueueGCGraceSeconds).
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.lock_queue (
			lock_id text,
			enqueued bigint,
			owner text,
			hint text,
			PRIMARY KEY (lock_id, enqueued, owner)
		) WITH CLUSTERING ORDER BY (enqueued ASC, owner ASC)
		  AND gc_grace_seconds = %d
		  AND speculative_retry = '%s'
		  AND comment = 'baton lock queues: waiters in arrival order'`, ks, QueueGCGraceSeconds, SpeculativeRetry),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.schema_version (
			component text PRIMARY KEY,
			version int
		)`, ks),
	}
}

// EnsureSchema creates the keyspace (with the given CQL replication map, DefaultReplication when
// empty) and baton's tables if they do not exist, waits for schema agreement and records the schema
// version. It is safe to run concurrently, but prefer running it once (from the operator or an
// install step): concurrent table creation strains Cassandra's schema agreement.
func EnsureSchema(ctx context.Context, session *gocql.Session, keyspace, replication string) error {
	if keyspace == "" {
		keyspace = DefaultKeyspace
	}
	if replication == "" {
		replication = DefaultReplication
	}
	if err := validateKeyspace(keyspace); err != nil {
		return err
	}
	for _, stmt := range schemaStatements(keyspace, replication) {
		if err := session.Query(stmt).ExecContext(ctx); err != nil {
			return fmt.Errorf("cassandrastore: creating schema in keyspace %s: %w", keyspace, err)
		}
		if err := session.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("cassandrastore: waiting for schema agreement: %w", err)
		}
	}
	if err := tuneTables(ctx, session, keyspace); err != nil {
		return err
	}
	if err := addHintColumn(ctx, session, keyspace); err != nil {
		return err
	}
	var existing int
	applied, err := session.Query(schemaVersionStatement(keyspace)).
		SerialConsistency(gocql.Serial).ScanCASContext(ctx, nil, &existing)
	if err != nil {
		return fmt.Errorf("cassandrastore: recording schema version: %w", err)
	}
	if !applied && existing > SchemaVersion {
		return fmt.Errorf("%w: keyspace %s has schema version %d, this build supports up to %d: upgrade baton",
			ErrSchema, keyspace, existing, SchemaVersion)
	}
	return nil
}

// tuneTables brings the tables of a keyspace created by an earlier release to this release's
// options: QueueGCGraceSeconds on the queue table and SpeculativeRetry on both. It changes the
// schema only where a setting differs.
func tuneTables(ctx context.Context, session *gocql.Session, keyspace string) error {
	for _, table := range []string{"lock_owners", "lock_queue"} {
		var (
			grace int
			spec  string
		)
		err := session.Query(`SELECT gc_grace_seconds, speculative_retry FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?`,
			keyspace, table).ScanContext(ctx, &grace, &spec)
		if err != nil {
			return fmt.Errorf("cassandrastore: reading the options of %s.%s: %w", keyspace, table, err)
		}
		var set []string
		if table == "lock_queue" && grace != QueueGCGraceSeconds {
			set = append(set, fmt.Sprintf("gc_grace_seconds = %d", QueueGCGraceSeconds))
		}
		if !strings.EqualFold(spec, SpeculativeRetry) {
			set = append(set, fmt.Sprintf("speculative_retry = '%s'", SpeculativeRetry))
		}
		if len(set) == 0 {
			continue
		}
		if err := session.Query(fmt.Sprintf(`ALTER TABLE %s.%s WITH %s`, keyspace, table, strings.Join(set, " AND "))).ExecContext(ctx); err != nil {
			return fmt.Errorf("cassandrastore: setting %s of %s.%s: %w", strings.Join(set, ", "), keyspace, table, err)
		}
		if err := session.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("cassandrastore: waiting for schema agreement: %w", err)
		}
	}
	return nil
}

// addHintColumn adds the hint column (a waiter's hint address, see lock.Hinter) to the queue table
// of a keyspace created by an earlier release. Readers of schema version 1 ignore it and writers
// without it leave it null, so the schema version stays 1.
func addHintColumn(ctx context.Context, session *gocql.Session, keyspace string) error {
	has, err := hasHintColumn(ctx, session, keyspace)
	if err != nil || has {
		return err
	}
	if err := session.Query(fmt.Sprintf(`ALTER TABLE %s.lock_queue ADD hint text`, keyspace)).ExecContext(ctx); err != nil {
		// Another EnsureSchema may have added it meanwhile.
		if has, herr := hasHintColumn(ctx, session, keyspace); herr != nil || !has {
			return fmt.Errorf("cassandrastore: adding column hint to %s.lock_queue: %w", keyspace, err)
		}
	}
	if err := session.AwaitSchemaAgreement(ctx); err != nil {
		return fmt.Errorf("cassandrastore: waiting for schema agreement: %w", err)
	}
	return nil
}

// hasHintColumn reports whether the keyspace's queue table has the hint column.
func hasHintColumn(ctx context.Context, session *gocql.Session, keyspace string) (bool, error) {
	var kind string
	err := session.Query(`SELECT kind FROM system_schema.columns WHERE keyspace_name = ? AND table_name = 'lock_queue' AND column_name = 'hint'`,
		keyspace).ScanContext(ctx, &kind)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("cassandrastore: reading the columns of %s.lock_queue: %w", keyspace, err)
	}
	return true, nil
}

// checkSchema verifies that the keyspace holds a schema version this build understands.
func checkSchema(ctx context.Context, session *gocql.Session, keyspace string, cons gocql.Consistency) error {
	var v int
	err := session.Query(fmt.Sprintf(`SELECT version FROM %s.schema_version WHERE component = 'lock'`, keyspace)).
		Consistency(cons).ScanContext(ctx, &v)
	switch {
	case errors.Is(err, gocql.ErrNotFound):
		return fmt.Errorf("%w: keyspace %s has no baton schema version: run EnsureSchema (the operator does) first", ErrSchemaMissing, keyspace)
	case err != nil:
		return fmt.Errorf("%w: reading schema version of keyspace %s (run EnsureSchema first?): %w", ErrSchemaMissing, keyspace, err)
	case v > SchemaVersion:
		return fmt.Errorf("%w: keyspace %s has schema version %d, this build supports up to %d: upgrade baton", ErrSchema, keyspace, v, SchemaVersion)
	case v < 1:
		return fmt.Errorf("%w: keyspace %s has invalid schema version %d", ErrSchema, keyspace, v)
	}
	return nil
}
