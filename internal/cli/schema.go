package cli

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/baton-dev/baton/lock/cassandrastore"
)

// schemaUsage is the usage of baton schema.
const schemaUsage = `Usage: baton schema --replication DC:RF[,DC:RF...] [--keyspace baton] [--role NAME]
                    [--operator-role NAME] [--allow-single-replica]

Prints the CQL a DBA applies, as a Cassandra superuser, to make a keyspace for baton: the keyspace
(NetworkTopologyStrategy, RF replicas in each data centre DC), baton's tables exactly as the
operator and 'baton run --create-schema' create them, the schema version row, and a login role that
may read and write that keyspace only (the tenant's role of docs/trust-model.md; set its password
with the ALTER ROLE the output shows). It connects nowhere. Apply it with e.g.
  baton schema --replication dc1:3,dc2:3 > baton.cql && cqlsh -u admin -f baton.cql

Every statement is idempotent (IF NOT EXISTS; grants may be repeated). Run baton with
--ensure-schema=false (chart: cassandra.ensureSchema=false) on a keyspace made this way, or grant
its role the rights to create tables.

Flags:
  --keyspace NAME          the keyspace (default baton)
  --replication DC:RF,...  replicas per data centre, e.g. dc1:3,dc2:3 (required; the names are
                           those of nodetool status). 3 per data centre survives a lost node
  --role NAME              the login role that holds locks in the keyspace: the tenant's role,
                           whose user name and password go in the Secret the DistributedLocks name
                           (default: the keyspace's name)
  --operator-role NAME     also a login role for the operator, with the same rights, when the
                           keyspace is one of the operator's (--operator-keyspaces); default none
  --allow-single-replica   accept a data centre with 1 replica: a lost node loses its locks or
                           stops them; development only
`

// dcNamePattern is what schema accepts as a data-centre name: it is written into a CQL string.
var dcNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// roleNamePattern is what schema accepts as a role name: written into CQL without quotes.
var roleNamePattern = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)

// dcReplicas is one data centre and its replication factor.
type dcReplicas struct {
	dc string
	rf int
}

// schema prints the CQL of a keyspace for baton.
func (p *program) schema(_ context.Context, args []string) (int, error) {
	fs := newFlagSet("schema")
	keyspace := fs.String("keyspace", cassandrastore.DefaultKeyspace, "the keyspace")
	replication := fs.String("replication", "", "replicas per data centre, DC:RF,...")
	role := fs.String("role", "", "the login role that holds locks in the keyspace")
	operatorRole := fs.String("operator-role", "", "a login role for the operator")
	allowSingle := fs.Bool("allow-single-replica", false, "accept a data centre with 1 replica")
	if _, err := parseFlags(fs, "schema", args, false); err != nil {
		return 0, err
	}
	dcs, err := parseReplication(*replication, *allowSingle)
	if err != nil {
		return 0, err
	}
	stmts, err := cassandrastore.SchemaStatements(*keyspace, replicationMap(dcs))
	if err != nil {
		return 0, usagef("schema", "--keyspace: %v", err)
	}
	if *role == "" {
		*role = *keyspace
	}
	for _, r := range []struct{ flag, name string }{{"--role", *role}, {"--operator-role", *operatorRole}} {
		if r.name != "" && !roleNamePattern.MatchString(r.name) {
			return 0, usagef("schema", "%s %q: a role name is a letter, then up to 47 letters, digits or '_'", r.flag, r.name)
		}
	}
	if *operatorRole != "" && *operatorRole == *role {
		return 0, usagef("schema", "--operator-role %q is --role too: the operator and a tenant must not share a role (docs/trust-model.md)", *role)
	}
	version, err := cassandrastore.SchemaVersionStatement(*keyspace)
	if err != nil {
		return 0, usagef("schema", "--keyspace: %v", err)
	}
	writeSchema(p.stdout, schemaScript{keyspace: *keyspace, dcs: dcs, tables: stmts, version: version,
		role: *role, operatorRole: *operatorRole})
	return ExitOK, nil
}

// parseReplication reads --replication: DC:RF pairs, comma-separated, each DC once, RF 1 to 99
// (1 only with allowSingle).
func parseReplication(s string, allowSingle bool) ([]dcReplicas, error) {
	if strings.TrimSpace(s) == "" {
		return nil, usagef("schema", "--replication is required: give the replicas per data centre, e.g. --replication dc1:3,dc2:3 "+
			"(the data-centre names are those of nodetool status)")
	}
	var dcs []dcReplicas
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		dc, rfText, ok := strings.Cut(part, ":")
		dc, rfText = strings.TrimSpace(dc), strings.TrimSpace(rfText)
		if !ok || dc == "" || rfText == "" {
			return nil, usagef("schema", "--replication %q: %q is not DC:RF, e.g. dc1:3", s, part)
		}
		if !dcNamePattern.MatchString(dc) {
			return nil, usagef("schema", "--replication %q: %q is not a data-centre name (letters, digits, '.', '_' or '-')", s, dc)
		}
		if seen[dc] {
			return nil, usagef("schema", "--replication %q: data centre %s is named twice", s, dc)
		}
		seen[dc] = true
		rf, err := strconv.Atoi(rfText)
		if err != nil || rf < 1 || rf > 99 {
			return nil, usagef("schema", "--replication %q: %s:%s: the replicas of a data centre are a number from 1 to 99 "+
				"(leave out a data centre that should hold none)", s, dc, rfText)
		}
		if rf == 1 && !allowSingle {
			return nil, usagef("schema", "--replication %q: data centre %s would keep 1 copy of each lock: a lost or restarting node "+
				"there stops its locks, and a lost disk loses their fencing tokens; give 3 (2 at least), or "+
				"--allow-single-replica for a development Cassandra", s, dc)
		}
		dcs = append(dcs, dcReplicas{dc: dc, rf: rf})
	}
	return dcs, nil
}

// replicationMap is the CQL replication map of NetworkTopologyStrategy with dcs.
func replicationMap(dcs []dcReplicas) string {
	var b strings.Builder
	b.WriteString("{'class': 'NetworkTopologyStrategy'")
	for _, d := range dcs {
		fmt.Fprintf(&b, ", '%s': %d", d.dc, d.rf)
	}
	b.WriteString("}")
	return b.String()
}

// schemaScript is what baton schema prints.
type schemaScript struct {
	keyspace           string
	dcs                []dcReplicas
	tables             []string // cassandrastore.SchemaStatements: the keyspace first
	version            string   // cassandrastore.SchemaVersionStatement
	role, operatorRole string
}

// writeSchema prints the script: comments start with "--", every statement ends with ";" at the
// end of a line and is followed by an empty line.
func writeSchema(w io.Writer, s schemaScript) {
	fmt.Fprintf(w, "-- baton schema version %d in keyspace %s, printed by baton schema.\n", cassandrastore.SchemaVersion, s.keyspace)
	fmt.Fprintln(w, "-- Apply as a Cassandra superuser (cqlsh -f FILE). Every statement may be applied again.")
	fmt.Fprintln(w)
	for _, stmt := range s.tables {
		fmt.Fprintf(w, "%s;\n\n", tidyCQL(stmt))
	}
	fmt.Fprintln(w, "-- The schema version baton checks at start (a lightweight transaction: it keeps a recorded version).")
	fmt.Fprintf(w, "%s;\n\n", s.version)
	writeRole(w, s.keyspace, s.role, "The tenant's role: the sidecars of its DistributedLocks log in with it (spec.cassandra.credentialsSecretRef).")
	if s.operatorRole != "" {
		writeRole(w, s.keyspace, s.operatorRole, "The operator's role (its --cassandra-username-file), for a keyspace in its --operator-keyspaces.")
	}
}

// writeRole prints a login role with SELECT and MODIFY on keyspace only.
func writeRole(w io.Writer, keyspace, role, comment string) {
	fmt.Fprintf(w, "-- %s\n", comment)
	fmt.Fprintln(w, "-- It may read and write this keyspace only: no other keyspace, no schema changes, no roles.")
	fmt.Fprintf(w, "CREATE ROLE IF NOT EXISTS %s WITH LOGIN = true;\n\n", role)
	fmt.Fprintln(w, "-- Set its password yourself (baton prints none), with PasswordAuthenticator:")
	fmt.Fprintf(w, "--   ALTER ROLE %s WITH PASSWORD = '<a long random password>';\n\n", role)
	fmt.Fprintln(w, "-- Lightweight transactions read before they write: they need SELECT as well as MODIFY.")
	fmt.Fprintf(w, "GRANT SELECT ON KEYSPACE %s TO %s;\n\n", keyspace, role)
	fmt.Fprintf(w, "GRANT MODIFY ON KEYSPACE %s TO %s;\n\n", keyspace, role)
}

// tidyCQL re-indents a statement written inside Go source: every line after the first is trimmed
// and indented by two spaces, but for a line that closes the column list.
func tidyCQL(stmt string) string {
	lines := strings.Split(strings.TrimSpace(stmt), "\n")
	for i := 1; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, ")") {
			l = "  " + l
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}
