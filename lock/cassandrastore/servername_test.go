package cassandrastore_test

import (
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// TestEmptyServerNameVerifiesNodeIP: with no TLS server name the driver verifies the IP address it
// resolved a contact point to, not the name given: a certificate that names only "localhost" is
// refused for contact point localhost:PORT, and accepted once the server name is "localhost". The
// server is a TLS listener (not Cassandra) that shakes hands and hangs up, so the accepted case
// still fails, but not as ErrServerNotTrusted. What the docs of tlsServerName say rests on this.
func TestEmptyServerNameVerifiesNodeIP(t *testing.T) {
	ca := testpki.NewCA(t)
	pair := ca.Issue(t, "localhost") // DNS name only, no IP SAN
	cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	connect := func(serverName string) error {
		conn := cassandrastore.Connection{ContactPoints: []string{"localhost:" + port}}
		conn.TLS = &cassandrastore.TLS{CA: ca.PEM, ServerName: serverName}
		cc, err := conn.ClusterConfig()
		if err != nil {
			t.Fatal(err)
		}
		cc.DisableInitialHostLookup = true
		s, err := cassandrastore.CreateSession(cc)
		if err == nil {
			s.Close()
			t.Fatal("a session with a server that is not Cassandra")
		}
		return err
	}
	if err := connect(""); !errors.Is(err, cassandrastore.ErrServerNotTrusted) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("no server name, a certificate naming only localhost: %v; want ErrServerNotTrusted about 127.0.0.1", err)
	}
	if err := connect("localhost"); errors.Is(err, cassandrastore.ErrServerNotTrusted) {
		t.Errorf("server name localhost, a certificate naming it: %v", err)
	}
}
