package localcassandra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

const probeInterval = 500 * time.Millisecond

// nodeSession opens a gocql session that talks to node i only, so that node
// is the coordinator of every query.
func (c *Cluster) nodeSession(i int) (*gocql.Session, error) {
	ip := net.ParseIP(c.cfg.IPs[i])
	cc := gocql.NewCluster(c.cfg.IPs[i])
	cc.Port = c.cfg.NativePort
	cc.DisableInitialHostLookup = true
	cc.HostFilter = gocql.HostFilterFunc(func(h *gocql.HostInfo) bool { return h.ConnectAddress().Equal(ip) })
	cc.NumConns = 1
	cc.ConnectTimeout = 3 * time.Second
	cc.Timeout = 10 * time.Second
	cc.Consistency = gocql.One
	if c.cfg.Authenticator == PasswordAuthenticator {
		cc.Authenticator = gocql.PasswordAuthenticator{Username: "cassandra", Password: "cassandra"}
	}
	if c.cfg.ClientTLS != nil {
		cc.SslOpts = &gocql.SslOptions{Config: c.cfg.ClientTLS.Clone(), EnableHostVerification: true}
	}
	s, err := cc.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.cfg.host(i), err)
	}
	return s, nil
}

// poll calls try every probeInterval until it succeeds, node i's process
// exits, or ctx is done. The error then carries the tail of node i's logs
// and try's last error.
func (c *Cluster) poll(ctx context.Context, i int, what string, try func() error) error {
	last := errors.New("not tried yet")
	for {
		p := c.running(i)
		if p == nil {
			return fmt.Errorf("localcassandra: cluster %s node %d is not running while waiting until it %s", c.cfg.Name, i+1, what)
		}
		select {
		case <-p.done:
			return c.nodeFailure(i, "exited while waiting until it "+what, last)
		default:
		}
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return c.nodeFailure(i, "timed out waiting until it "+what, fmt.Errorf("%w (last error: %v)", ctx.Err(), last))
		}
		if last = try(); last == nil {
			return nil
		}
		c.cfg.Log.V(2).Info("probe failed", "cluster", c.cfg.Name, "node", i+1, "what", what, "err", last)
		select {
		case <-ctx.Done():
		case <-p.done:
		case <-time.After(probeInterval):
		}
	}
}

// waitCQL waits until node i answers SELECT release_version FROM system.local.
func (c *Cluster) waitCQL(ctx context.Context, i int) error {
	return c.poll(ctx, i, "answers CQL", func() error {
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", c.cfg.host(i))
		if err != nil {
			return err
		}
		_ = conn.Close()
		s, err := c.nodeSession(i)
		if err != nil {
			return err
		}
		defer s.Close()
		var version string
		if err := s.Query("SELECT release_version FROM system.local").ScanContext(ctx, &version); err != nil {
			return fmt.Errorf("query system.local: %w", err)
		}
		c.cfg.Log.V(1).Info("node answers CQL", "cluster", c.cfg.Name, "node", i+1, "release_version", version)
		return nil
	})
}

// waitPeersUp waits until node i knows all other nodes as peers and, as
// coordinator, can read system_distributed (replicated to every node of a
// cluster of up to three) at consistency ALL, which it only attempts when
// its failure detector considers every replica UP.
func (c *Cluster) waitPeersUp(ctx context.Context, i int) error {
	return c.poll(ctx, i, "sees all peers UP", func() error {
		s, err := c.nodeSession(i)
		if err != nil {
			return err
		}
		defer s.Close()
		iter := s.Query("SELECT peer FROM system.peers").IterContext(ctx)
		var peer net.IP
		n := 0
		for iter.Scan(&peer) {
			n++
		}
		if err := iter.Close(); err != nil {
			return fmt.Errorf("query system.peers: %w", err)
		}
		if n != c.cfg.Nodes-1 {
			return fmt.Errorf("knows %d peers, want %d", n, c.cfg.Nodes-1)
		}
		iter = s.Query("SELECT id FROM system_distributed.repair_history LIMIT 1").Consistency(gocql.All).IterContext(ctx)
		if err := iter.Close(); err != nil {
			return fmt.Errorf("read at consistency ALL: %w", err)
		}
		return nil
	})
}
