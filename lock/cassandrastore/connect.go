package cassandrastore

import (
	"fmt"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Connection says how to reach the Cassandra cluster holding the lock tables and how locks use
// it. It is the one description of a lock store connection: the sidecar and the baton CLI fill it
// from their settings and mounted files, the operator from a DistributedLock and its Secrets, and
// all of them connect through ClusterConfig and StoreOptions, so they talk to Cassandra the same
// way.
type Connection struct {
	// ContactPoints are "host" or "host:port" (port 9042 when left out).
	ContactPoints []string
	// Keyspace holds the lock tables; DefaultKeyspace when empty.
	Keyspace string
	// LocalDC, when set, routes requests to that data centre first (required by LOCAL_*).
	LocalDC string
	// Consistency and SerialConsistency of lock statements (see WithConsistency and
	// WithSerialConsistency); they also become the session defaults. The zero value (ANY, never
	// right for a lock) means the default: QUORUM and SERIAL.
	Consistency, SerialConsistency gocql.Consistency
	// ClusterName, when set, is the cluster_name the cluster must carry (see WithClusterName).
	ClusterName string
	// Credentials authenticate the client and secure the connection.
	Credentials
}

// ReconnectInterval is how often a session tries again to connect to the nodes it counts down:
// a restarted node is used again at most this long after it answers CQL.
const ReconnectInterval = time.Second

// Credentials are what a Connection proves and checks: a password login and TLS. They are kept
// apart from the addresses so that the operator can hold its own for its default contact points.
type Credentials struct {
	// Username and Password authenticate when Username is set.
	Username, Password string
	// TLS, when set, encrypts every connection (see TLS).
	TLS *TLS
}

// String describes c without secrets: not even the user name, which is half a password login
// and lands in logs, Events and status.
func (c Credentials) String() string {
	s := "a password login"
	if c.Username == "" {
		s = "no password login"
	}
	if c.TLS != nil {
		s += ", TLS"
	}
	return s
}

// Redact returns err with c's user name and password replaced in its message, for errors that
// go to logs, Events or status: Cassandra names the user in a refused login or a missing
// permission. errors.Is and errors.As still see err; the message of what Unwrap returns is not
// redacted. It returns err itself (nil for nil) when there is nothing to replace.
func (c Credentials) Redact(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, secret := range []string{c.Password, c.Username} {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "[redacted]")
		}
	}
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose message has secrets replaced.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// GoString describes c for %#v, without secrets.
func (c Credentials) GoString() string { return "cassandrastore.Credentials{" + c.String() + "}" }

// ClusterConfig returns the gocql configuration of c: consistencies, data-centre aware routing,
// authentication and TLS. Lock requests carry their own deadlines; the driver's timeouts only
// bound a request that lost its way. Errors come from the TLS material (ErrTLS).
func (c Connection) ClusterConfig() (*gocql.ClusterConfig, error) {
	cc := gocql.NewCluster(c.ContactPoints...)
	cc.Consistency, cc.SerialConsistency = c.consistencies()
	cc.Timeout, cc.ConnectTimeout = 5*time.Second, 5*time.Second
	// A node that comes back (a restart) is used again within ReconnectInterval. Left to node-up
	// events, the driver waits 10 s more before it connects to a node that runs Cassandra 3.0 to
	// 5.0 (its check for releases before 2.2 compares major and minor version apart), and misses
	// the node altogether until its 60 s default interval if the event was lost with its control
	// connection (a hung first contact point). Meanwhile a session has one node fewer to turn to
	// if another one hangs.
	cc.ReconnectInterval = ReconnectInterval
	// One connection per node: a lock's requests are few and small, and every connection costs
	// the node requests of its own while idle. The driver (v2.1.2) sends a heartbeat (OPTIONS) on
	// every connection every 5 s, which it does not let us change, and Cassandra counts each as a
	// request: with its default of two connections per node plus the control connection (two
	// heartbeats of its own), an idle session on one node costs 0.8 requests per second, with one
	// 0.6 (docs/design.md, the poll schedule, driver traffic).
	cc.NumConns = 1
	// Token-aware: a replica of the lock's partition coordinates (the first in token order, so one
	// lock's transactions meet on one coordinator), with slow coordinators tried last.
	// With a data-centre local consistency no other data centre ever coordinates: see
	// newSlowHostPolicy.
	newInner := func() gocql.HostSelectionPolicy {
		if c.LocalDC != "" {
			return gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(c.LocalDC), gocql.DoNotShuffleReplicas())
		}
		return gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy(), gocql.DoNotShuffleReplicas())
	}
	localOnly := c.LocalDC != "" && (cc.SerialConsistency == gocql.LocalSerial || cc.Consistency == gocql.LocalQuorum || cc.Consistency == gocql.LocalOne)
	policy := newSlowHostPolicy(newInner, localOnly, time.Now)
	cc.PoolConfig.HostSelectionPolicy, cc.QueryObserver = policy, policy
	if c.Username != "" {
		cc.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: c.Password}
	}
	if c.TLS != nil {
		tc, err := c.TLS.Config()
		if err != nil {
			return nil, err
		}
		// With a tls.Config the driver verifies the servers' certificates (against tc.RootCAs, or
		// the system's roots without a CA) unless InsecureSkipVerify, which is never set here.
		cc.SslOpts = &gocql.SslOptions{Config: tc, EnableHostVerification: true}
	}
	return cc, nil
}

// StoreOptions returns the options of New for c: keyspace, consistencies and cluster name.
func (c Connection) StoreOptions() []Option {
	cons, serial := c.consistencies()
	opts := []Option{WithConsistency(cons), WithSerialConsistency(serial), WithClusterName(c.ClusterName)}
	if c.Keyspace != "" {
		opts = append(opts, WithKeyspace(c.Keyspace))
	}
	return opts
}

// String describes c for logs and messages, without secrets (the user name included).
func (c Connection) String() string {
	ks := c.Keyspace
	if ks == "" {
		ks = DefaultKeyspace
	}
	s := fmt.Sprintf("Cassandra %v keyspace %s", c.ContactPoints, ks)
	if c.Username != "" {
		s += " with a password login"
	}
	if c.TLS != nil {
		s += " over TLS"
	}
	return s
}

// GoString describes c for %#v, without secrets.
func (c Connection) GoString() string { return "cassandrastore.Connection{" + c.String() + "}" }

func (c Connection) consistencies() (cons, serial gocql.Consistency) {
	cons, serial = c.Consistency, c.SerialConsistency
	if cons == gocql.Any {
		cons = gocql.Quorum
	}
	if serial == gocql.Any {
		serial = gocql.Serial
	}
	return cons, serial
}
