package cassandrastore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// ErrUnsafeServer is returned by New when a node of the cluster runs a Cassandra version whose
// lightweight transactions are known to be unsafe for a lock, or reports a version that cannot be
// judged. The message names the node, its version and what to do.
var ErrUnsafeServer = errors.New("cassandrastore: Cassandra server unsafe for a lock")

// ErrClusterMismatch is returned by New when WithClusterName names a cluster other than the one
// the session reached.
var ErrClusterMismatch = errors.New("cassandrastore: connected to a different Cassandra cluster")

// MinSafeVersions names the first Cassandra releases of each line with the fix of CASSANDRA-12126,
// for messages and documentation. Every 4.0 release (4.0.0 and later) and every later line
// (4.1, 5.0, ...) has it; the 3.x tick-tock releases 3.1 to 3.10 and everything before 3.0.24 never
// got it.
const MinSafeVersions = "3.0.24, 3.11.10 or 4.0-beta4"

// unsafePaxosVariant matches the paxos_variant settings (Cassandra 4.1 and later) that turn the fix
// of CASSANDRA-12126 off again: v1_without_linearizable_reads_or_rejected_writes and the v2
// variants "without linearizable reads".
var unsafePaxosVariant = regexp.MustCompile(`without_linearizable`)

// WithClusterName makes New refuse a cluster whose cluster_name (system.local) is not name: the
// Cassandra cluster a lock was first seen on, so that changed contact points cannot silently move
// a lock to another cluster and give it a second holder and a second token sequence. Empty (the
// default) checks nothing; Store.ClusterName tells which cluster was reached.
func WithClusterName(name string) Option { return func(s *Store) { s.wantCluster = name } }

// ClusterName returns the cluster_name of the Cassandra cluster the store is connected to, as read
// by New.
func (s *Store) ClusterName() string { return s.cluster }

// node is what one node says about itself (system.local) or what its peer knows (system.peers).
type node struct {
	addr    string // for messages: broadcast or peer address
	release string // release_version, as reported
}

// serverInfo is the cluster as one node sees it.
type serverInfo struct {
	cluster      string
	nodes        []node // the answering node first
	paxosVariant string // the answering node's paxos_variant (Cassandra 4.1+), "" when unknown
}

// checkServer reads the cluster name and every node's version once, and refuses an unsafe or
// unrecognised server version, then a cluster other than the expected one.
func (s *Store) checkServer(ctx context.Context) error {
	info, err := readServer(ctx, s.session)
	if err != nil {
		return err
	}
	s.cluster = info.cluster
	for _, n := range info.nodes {
		if err := checkVersion(n.addr, n.release); err != nil {
			return err
		}
	}
	if err := checkPaxosVariant(info.nodes[0].addr, info.paxosVariant); err != nil {
		return err
	}
	if s.wantCluster != "" && s.wantCluster != info.cluster {
		return fmt.Errorf("%w: the lock lives on Cassandra cluster %q, but these contact points reach cluster %q: "+
			"point the contact points back at nodes of cluster %q; moving a lock to another cluster means creating a new "+
			"DistributedLock (or a new keyspace), never editing the old one while it is held",
			ErrClusterMismatch, s.wantCluster, info.cluster, s.wantCluster)
	}
	return nil
}

// checkPaxosVariant refuses a node whose paxos_variant setting (Cassandra 4.1 and later; "" when
// unknown) turns the fix of CASSANDRA-12126 off.
func checkPaxosVariant(addr, variant string) error {
	if !unsafePaxosVariant.MatchString(variant) {
		return nil
	}
	return fmt.Errorf("%w: node %s runs with paxos_variant %s, which gives up linearizable SERIAL reads or "+
		"conditional writes that do not apply (CASSANDRA-12126): two contenders could both be granted the lock; "+
		"set paxos_variant to v2 (or v1) on every node", ErrUnsafeServer, addr, variant)
}

// readServer reads system.local and system.peers from one node, so that together they cover every
// node: any node's peers are all the others. It asks the nodes the driver knows in turn, and falls
// back to letting the driver choose when none can be asked directly.
func readServer(ctx context.Context, session *gocql.Session) (serverInfo, error) {
	var errs []error
	for _, h := range session.GetHosts() {
		if h == nil || h.HostID() == "" || !h.IsUp() {
			continue
		}
		info, err := readServerFrom(ctx, session, h.HostID())
		if err == nil {
			return info, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return readServerFrom(ctx, session, "")
	}
	return serverInfo{}, errors.Join(errs...)
}

// readServerFrom reads the server information from the node with hostID ("" lets the driver
// choose; then system.local and system.peers may come from two nodes, which still covers all
// but, at worst, one node).
func readServerFrom(ctx context.Context, session *gocql.Session, hostID string) (serverInfo, error) {
	var (
		info           serverInfo
		addr           net.IP
		cluster, local string
	)
	err := session.Query(`SELECT cluster_name, release_version, broadcast_address FROM system.local WHERE key = 'local'`).
		SetHostID(hostID).Consistency(gocql.One).Idempotent(true).ScanContext(ctx, &cluster, &local, &addr)
	if err != nil {
		return info, fmt.Errorf("cassandrastore: reading the server's version and cluster name from system.local: %w", err)
	}
	info.cluster = cluster
	info.nodes = append(info.nodes, node{addr: ipString(addr, "the local node"), release: local})

	iter := session.Query(`SELECT peer, host_id, release_version FROM system.peers`).
		SetHostID(hostID).Consistency(gocql.One).Idempotent(true).IterContext(ctx)
	var (
		peer    net.IP
		id      gocql.UUID
		release string
	)
	for iter.Scan(&peer, &id, &release) {
		if id == (gocql.UUID{}) {
			continue // an incomplete row, as drivers skip them: not a member of the ring
		}
		info.nodes = append(info.nodes, node{addr: ipString(peer, "a peer"), release: release})
		peer, id, release = nil, gocql.UUID{}, ""
	}
	if err := iter.Close(); err != nil {
		return info, fmt.Errorf("cassandrastore: reading the versions of the other nodes from system.peers: %w", err)
	}

	// Cassandra 4.0 and later list their settings in a virtual table; 4.1 added paxos_variant. Older
	// servers have neither, which only means there is nothing to check.
	var variant string
	err = session.Query(`SELECT value FROM system_views.settings WHERE name = 'paxos_variant'`).
		SetHostID(hostID).Consistency(gocql.One).Idempotent(true).ScanContext(ctx, &variant)
	if err == nil {
		info.paxosVariant = variant
	}
	return info, nil
}

func ipString(ip net.IP, unknown string) string {
	if ip == nil {
		return unknown
	}
	return ip.String()
}

// version is a Cassandra release_version, as far as the safety policy needs it.
type version struct {
	major, minor, patch int
	// pre ranks the pre-release: 4 for a release, 3 rc, 2 beta, 1 alpha, 0 a tag we do not know
	// (so that it counts as earlier than any release of the same numbers).
	pre, preNum int
	// snapshot is true for a development build: it counts as just before the same version without it.
	snapshot bool
}

const (
	preUnknown = iota
	preAlpha
	preBeta
	preRC
	preRelease
)

var (
	versionCore = regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?((?:\.\d+)*)`)
	preTag      = regexp.MustCompile(`^(?i)(alpha|beta|rc)[.]?(\d*)$`)
)

// parseVersion reads a release_version tolerantly: "5.0.9", "4.0-beta4", "3.11.10-SNAPSHOT",
// "4.0.0.6816" (vendor builds with a fourth number, which is ignored), "4.1.3-vendor" (an unknown
// suffix counts as a build of that release). It fails only when the string does not start with
// major.minor.
func parseVersion(s string) (version, error) {
	s = strings.TrimSpace(s)
	m := versionCore.FindStringSubmatch(s)
	if m == nil {
		return version{}, fmt.Errorf("%q does not start with major.minor", s)
	}
	var v version
	var err error
	if v.major, err = strconv.Atoi(m[1]); err != nil {
		return version{}, fmt.Errorf("%q: major version: %w", s, err)
	}
	if v.minor, err = strconv.Atoi(m[2]); err != nil {
		return version{}, fmt.Errorf("%q: minor version: %w", s, err)
	}
	if m[3] != "" {
		if v.patch, err = strconv.Atoi(m[3]); err != nil {
			return version{}, fmt.Errorf("%q: patch version: %w", s, err)
		}
	}
	v.pre = preRelease
	rest := strings.TrimLeft(s[len(m[0]):], "-~+_. ")
	if rest == "" {
		return v, nil
	}
	tokens := strings.FieldsFunc(rest, func(r rune) bool { return r == '-' || r == '+' || r == '~' || r == '_' })
	for i, tok := range tokens {
		if strings.EqualFold(tok, "SNAPSHOT") {
			v.snapshot = true
			continue
		}
		if i == 0 {
			if p := preTag.FindStringSubmatch(tok); p != nil {
				v.pre = map[string]int{"alpha": preAlpha, "beta": preBeta, "rc": preRC}[strings.ToLower(p[1])]
				if p[2] != "" {
					v.preNum, _ = strconv.Atoi(p[2])
				}
			}
			// Any other first tag is a vendor's name for a build of this release.
		}
	}
	if v.snapshot && v.pre == preRelease && v.patch == 0 {
		// "4.0-SNAPSHOT" is the development line before 4.0's first pre-release, not a build just
		// before 4.0.0: it predates every alpha, beta and rc of the line.
		v.pre = preUnknown
	}
	return v, nil
}

// compare orders versions: -1 when v is earlier than o, 0 when equal, 1 when later.
func (v version) compare(o version) int {
	for _, d := range [][2]int{
		{v.major, o.major}, {v.minor, o.minor}, {v.patch, o.patch},
		{v.pre, o.pre}, {v.preNum, o.preNum}, {b2i(!v.snapshot), b2i(!o.snapshot)},
	} {
		switch {
		case d[0] < d[1]:
			return -1
		case d[0] > d[1]:
			return 1
		}
	}
	return 0
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// firstFixed maps a release line (major, minor) to its first release with the fix of
// CASSANDRA-12126 ("Fix serial read/non-applying CAS linearizability"): 3.0.24 and 3.11.10 (both
// February 2021) and 4.0-beta4 (December 2020). Lines not listed below 4.1 never got the fix.
var firstFixed = map[[2]int]version{
	{3, 0}:  {major: 3, minor: 0, patch: 24, pre: preRelease},
	{3, 11}: {major: 3, minor: 11, patch: 10, pre: preRelease},
	{4, 0}:  {major: 4, minor: 0, patch: 0, pre: preBeta, preNum: 4},
}

// versionSafe reports whether a node running v has lightweight transactions a lock can rely on.
func versionSafe(v version) bool {
	if v.major > 4 || (v.major == 4 && v.minor >= 1) {
		return true
	}
	fixed, ok := firstFixed[[2]int{v.major, v.minor}]
	return ok && v.compare(fixed) >= 0
}

// checkVersion refuses a node whose release_version is known to be unsafe for a lock or cannot be
// read as a Cassandra version.
func checkVersion(addr, release string) error {
	v, err := parseVersion(release)
	if err != nil {
		return fmt.Errorf("%w: node %s reports release_version %s, which is not a Cassandra version baton can judge: "+
			"baton needs every node to run Cassandra %s or later, where lightweight transactions are linearizable "+
			"(CASSANDRA-12126); if this is such a server, its version string is unusual: please report it", ErrUnsafeServer, addr, err, MinSafeVersions)
	}
	if versionSafe(v) {
		return nil
	}
	return fmt.Errorf("%w: node %s runs Cassandra %s, whose lightweight transactions are not linearizable "+
		"(CASSANDRA-12126: a SERIAL read or a conditional write that does not apply can miss a Paxos proposal that is in "+
		"progress and commits later, so two contenders can both be granted the lock): upgrade every node to %s or later "+
		"(any 4.0, 4.1 or 5.0 release)", ErrUnsafeServer, addr, strings.TrimSpace(release), MinSafeVersions)
}
