package cassandrastore

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// SchemaVersion is the version of the tables this package reads and writes.
const SchemaVersion = 1

// DefaultKeyspace is the keyspace used when none is given.
const DefaultKeyspace = "baton"

// DefaultReplication is the keyspace replication EnsureSchema uses when none is given: fine for one
// node, too weak for production (use NetworkTopologyStrategy with 3 replicas per data centre).
const DefaultReplication = "{'class': 'SimpleStrategy', 'replication_factor': 1}"

// ErrSchema is returned when the keyspace lacks baton's tables or holds a newer schema version.
var ErrSchema = errors.New("cassandrastore: schema")

// ErrSchemaMissing (which is also ErrSchema) is returned when the keyspace, its tables or its
// schema version cannot be read yet: worth waiting for whoever runs EnsureSchema.
var ErrSchemaMissing = fmt.Errorf("%w not created yet", ErrSchema)

var keyspaceName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)

func validateKeyspace(ks string) error {
	if !keyspaceName.MatchString(ks) {
		return fmt.Errorf("cassandrastore: keyspace %q must be 1-48 letters, digits or underscores, starting with a letter", ks)
	}
	return nil
}

func schemaStatements(ks, replication string) []string {
	return []string{
		fmt.Sprintf(`CREATE KEYSPACE IF NOT EXISTS %s WITH replication = %s`, ks, replication),
		// Written only by lightweight transactions; no TTL, no deletes (BRIEF §3 rules 1-2).
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.lock_owners (
			lock_id text PRIMARY KEY,
			owner text,
			fencing_token bigint,
			version bigint,
			lease_ms bigint,
			revoked boolean,
			granted_at timestamp,
			renewed_at timestamp
		) WITH comment = 'baton lock owner records: written only by LWT'`, ks),
		// Plain writes with TTL; tombstones of finished waiters are purged quickly.
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.lock_queue (
			lock_id text,
			enqueued bigint,
			owner text,
			PRIMARY KEY (lock_id, enqueued, owner)
		) WITH CLUSTERING ORDER BY (enqueued ASC, owner ASC)
		  AND gc_grace_seconds = 600
		  AND comment = 'baton lock queues: waiters in arrival order'`, ks),
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
	var existing int
	applied, err := session.Query(
		fmt.Sprintf(`INSERT INTO %s.schema_version (component, version) VALUES ('lock', ?) IF NOT EXISTS`, keyspace),
		SchemaVersion).SerialConsistency(gocql.Serial).ScanCASContext(ctx, nil, &existing)
	if err != nil {
		return fmt.Errorf("cassandrastore: recording schema version: %w", err)
	}
	if !applied && existing > SchemaVersion {
		return fmt.Errorf("%w: keyspace %s has schema version %d, this build supports up to %d: upgrade baton",
			ErrSchema, keyspace, existing, SchemaVersion)
	}
	return nil
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
