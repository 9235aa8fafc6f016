package cassandrastore

import (
	"crypto/tls"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Connection says how to reach the Cassandra cluster holding the lock tables. The sidecar fills
// it from its flags and mounted files, the operator from a DistributedLock and its Secrets; both
// connect through ClusterConfig, so they talk to Cassandra the same way.
type Connection struct {
	// ContactPoints are "host" or "host:port" (port 9042 when left out).
	ContactPoints []string
	// LocalDC, when set, routes requests to that data centre first (required by LOCAL_*).
	LocalDC string
	// Consistency and SerialConsistency of lock statements (see WithConsistency and
	// WithSerialConsistency); they become the session defaults.
	Consistency, SerialConsistency gocql.Consistency
	// Username and Password authenticate when Username is set.
	Username, Password string
	// TLS, when set, encrypts every connection with this configuration.
	TLS *tls.Config
}

// ClusterConfig returns the gocql configuration of c. Lock requests carry their own deadlines;
// the driver's timeouts only bound a request that lost its way.
func (c Connection) ClusterConfig() *gocql.ClusterConfig {
	cc := gocql.NewCluster(c.ContactPoints...)
	cc.Consistency, cc.SerialConsistency = c.Consistency, c.SerialConsistency
	cc.Timeout, cc.ConnectTimeout = 5*time.Second, 5*time.Second
	if c.LocalDC != "" {
		cc.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(c.LocalDC))
	}
	if c.Username != "" {
		cc.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: c.Password}
	}
	if c.TLS != nil {
		cc.SslOpts = &gocql.SslOptions{Config: c.TLS, EnableHostVerification: c.TLS.RootCAs != nil}
	}
	return cc
}
