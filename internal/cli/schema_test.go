package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/schema.golden.cql")

// TestSchemaGolden pins what baton schema prints for a DBA (testdata/schema.golden.cql; go test
// -run TestSchemaGolden -update rewrites it). A change to the tables in cassandrastore shows here.
func TestSchemaGolden(t *testing.T) {
	inv := runCLI(t, &invocation{args: []string{"schema", "--keyspace", "tenant_shop", "--replication", "dc1:3, dc2:3",
		"--operator-role", "baton_operator"}})
	if inv.code != ExitOK {
		t.Fatalf("exit %d, stderr: %s", inv.code, inv.stderr.String())
	}
	got := inv.stdout.String()
	golden := filepath.Join("testdata", "schema.golden.cql")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run TestSchemaGolden -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("baton schema printed\n%s\nwant (%s)\n%s", got, golden, want)
	}
}

// TestSchemaUsageErrors: bad input is refused with exit 2 and a message that says what to give.
func TestSchemaUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no replication", nil, "--replication is required: give the replicas per data centre, e.g. --replication dc1:3,dc2:3"},
		{"one copy", []string{"--replication", "dc1:1"}, "data centre dc1 would keep 1 copy of each lock"},
		{"one copy in one DC", []string{"--replication", "dc1:3,dc2:1"}, "data centre dc2 would keep 1 copy"},
		{"no RF", []string{"--replication", "dc1"}, `"dc1" is not DC:RF, e.g. dc1:3`},
		{"empty RF", []string{"--replication", "dc1:"}, `"dc1:" is not DC:RF`},
		{"RF zero", []string{"--replication", "dc1:0"}, "dc1:0: the replicas of a data centre are a number from 1 to 99 (leave out a data centre that should hold none)"},
		{"RF not a number", []string{"--replication", "dc1:three"}, "dc1:three: the replicas of a data centre are a number from 1 to 99"},
		{"RF negative", []string{"--replication", "dc1:-3"}, "dc1:-3: the replicas"},
		{"DC twice", []string{"--replication", "dc1:3,dc1:5"}, "data centre dc1 is named twice"},
		{"DC with a quote", []string{"--replication", "dc1':3"}, `"dc1'" is not a data-centre name`},
		{"bad keyspace", []string{"--replication", "dc1:3", "--keyspace", "shop-orders"}, `--keyspace: cassandrastore: keyspace "shop-orders" must be 1-48 letters`},
		{"bad role", []string{"--replication", "dc1:3", "--role", "a;DROP"}, `--role "a;DROP": a role name is a letter`},
		{"shared role", []string{"--replication", "dc1:3", "--role", "x", "--operator-role", "x"}, `--operator-role "x" is --role too`},
		{"argument", []string{"--replication", "dc1:3", "extra"}, `unexpected argument "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := runCLI(t, &invocation{args: append([]string{"schema"}, tc.args...)})
			if inv.code != ExitUsage || !strings.Contains(inv.stderr.String(), tc.want) || inv.stdout.String() != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, no output and stderr containing %q",
					inv.code, inv.stdout.String(), inv.stderr.String(), tc.want)
			}
		})
	}
	inv := runCLI(t, &invocation{args: []string{"schema", "--replication", "dc1:1", "--allow-single-replica"}})
	if inv.code != ExitOK || !strings.Contains(inv.stdout.String(), "'dc1': 1}") {
		t.Errorf("--allow-single-replica: exit %d, stdout %q, stderr %q", inv.code, inv.stdout.String(), inv.stderr.String())
	}
}

// cqlStatements splits what baton schema prints into statements: comment lines dropped, each
// statement ending with ";" at the end of a line.
func cqlStatements(script string) []string {
	var stmts []string
	var cur []string
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") || strings.TrimSpace(line) == "" && len(cur) == 0 {
			continue
		}
		cur = append(cur, line)
		if strings.HasSuffix(line, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.Join(cur, "\n"), ";"))
			cur = nil
		}
	}
	return stmts
}

// TestSchemaAppliedMakesAWorkingKeyspace: the CQL baton schema prints, executed statement by
// statement on the real Cassandra of this test binary, gives a keyspace with the tables and table
// options EnsureSchema makes, which cassandrastore.New accepts and in which baton run gets a lock.
//
// What it does not show: that the roles and grants work. This Cassandra runs without
// authentication (AllowAllAuthenticator, AllowAllAuthorizer), where an anonymous client may neither
// create roles nor grant; those statements are only checked to parse (Cassandra refuses them for
// want of a login, after parsing; a misspelt one is a syntax error, checked below too).
func TestSchemaAppliedMakesAWorkingKeyspace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	session := single.Session(t)
	var dc string
	if err := session.Query(`SELECT data_center FROM system.local WHERE key = 'local'`).ScanContext(ctx, &dc); err != nil {
		t.Fatal(err)
	}
	ks := fmt.Sprintf("schema_cli_%d", time.Now().UnixNano()%1e9)
	inv := runCLI(t, &invocation{args: []string{"schema", "--keyspace", ks, "--replication", dc + ":1", "--allow-single-replica",
		"--role", ks + "_tenant", "--operator-role", ks + "_operator"}})
	if inv.code != ExitOK {
		t.Fatalf("baton schema: exit %d, stderr: %s", inv.code, inv.stderr.String())
	}
	stmts := cqlStatements(inv.stdout.String())
	var roles int
	for _, stmt := range stmts {
		err := session.Query(stmt).ExecContext(ctx)
		if strings.HasPrefix(stmt, "GRANT ") || strings.HasPrefix(stmt, "CREATE ROLE ") {
			roles++
			if !refusedForWantOfLogin(err) {
				t.Errorf("%s: got %v, want this Cassandra to refuse it for want of a login (so it parsed)", stmt, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("executing the printed statement\n%s\n: %v", stmt, err)
		}
		if err := session.AwaitSchemaAgreement(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if roles != 6 {
		t.Errorf("%d role statements, want 6 (a role, SELECT and MODIFY for each of two roles)", roles)
	}
	if err := session.Query(fmt.Sprintf("GRANT SELECT ON KEYSPAC %s TO %s_tenant", ks, ks)).ExecContext(ctx); refusedForWantOfLogin(err) {
		t.Errorf("a misspelt GRANT is refused for want of a login too (%v): the check above shows nothing", err)
	}

	// The same tables and options as EnsureSchema's.
	ref := ks + "_ref"
	if err := cassandrastore.EnsureSchema(ctx, session, ref, "{'class': 'SimpleStrategy', 'replication_factor': 1}"); err != nil {
		t.Fatal(err)
	}
	if got, want := keyspaceShape(t, ctx, session, ks), keyspaceShape(t, ctx, session, ref); !slices.Equal(got, want) {
		t.Errorf("baton schema's keyspace differs from EnsureSchema's:\n got %q\nwant %q", got, want)
	}
	var version int
	if err := session.Query(fmt.Sprintf(`SELECT version FROM %s.schema_version WHERE component = 'lock'`, ks)).
		Consistency(gocql.Quorum).ScanContext(ctx, &version); err != nil || version != cassandrastore.SchemaVersion {
		t.Errorf("schema version row: %d, %v; want %d", version, err, cassandrastore.SchemaVersion)
	}

	if _, err := cassandrastore.New(ctx, session, cassandrastore.WithKeyspace(ks)); err != nil {
		t.Fatalf("cassandrastore.New refuses the keyspace baton schema made: %v", err)
	}
	run := runCLI(t, &invocation{pid: 3001, args: []string{"run", "--cassandra-hosts", strings.Join(single.Cluster(t).Hosts(), ","),
		"--keyspace", ks, "--lock", "schema-test", "--", "sh", "-c", `echo "$BATON_TOKEN"`}})
	if run.code != ExitOK {
		t.Fatalf("baton run in the keyspace baton schema made: exit %d, stderr: %s", run.code, run.stderr.String())
	}
	if tok := token(t, run); tok < 1 {
		t.Errorf("token %d, want a positive fencing token", tok)
	}
}

// refusedForWantOfLogin says whether err is Cassandra refusing a role statement of an anonymous
// client (AllowAllAuthenticator and AllowAllAuthorizer), which it does only after parsing it.
func refusedForWantOfLogin(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "You have to be logged in and not anonymous") ||
		strings.Contains(err.Error(), "AllowAllAuthorizer"))
}

// keyspaceShape lists the columns and the table options of keyspace ks, without its name.
func keyspaceShape(t *testing.T, ctx context.Context, session *gocql.Session, ks string) []string {
	t.Helper()
	var out []string
	iter := session.Query(`SELECT table_name, column_name, type, kind, clustering_order, position FROM system_schema.columns WHERE keyspace_name = ?`, ks).IterContext(ctx)
	var table, column, typ, kind, order string
	var pos int
	for iter.Scan(&table, &column, &typ, &kind, &order, &pos) {
		out = append(out, fmt.Sprintf("%s.%s %s %s %s %d", table, column, typ, kind, order, pos))
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	iter = session.Query(`SELECT table_name, gc_grace_seconds, speculative_retry, comment FROM system_schema.tables WHERE keyspace_name = ?`, ks).IterContext(ctx)
	var grace int
	var spec, comment string
	for iter.Scan(&table, &grace, &spec, &comment) {
		out = append(out, fmt.Sprintf("%s gc_grace_seconds=%d speculative_retry=%s comment=%q", table, grace, spec, comment))
	}
	if err := iter.Close(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatalf("keyspace %s has no tables", ks)
	}
	return out
}
