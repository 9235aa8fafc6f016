package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

func TestClusterConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := CassandraOptions{ContactPoints: []string{"db:9042"}, Consistency: "LOCAL_QUORUM", SerialConsistency: "LOCAL_SERIAL",
		LocalDC: "dc1", UsernameFile: write("user", "baton\n"), PasswordFile: write("pass", "s3cret\n")}
	cc, err := c.ClusterConfig()
	if err != nil {
		t.Fatal(err)
	}
	auth, ok := cc.Authenticator.(gocql.PasswordAuthenticator)
	if !ok || auth.Username != "baton" || auth.Password != "s3cret" {
		t.Fatalf("authenticator %#v", cc.Authenticator)
	}
	if cc.Consistency != gocql.LocalQuorum || cc.SerialConsistency != gocql.LocalSerial || cc.PoolConfig.HostSelectionPolicy == nil {
		t.Fatalf("consistency %v/%v, policy %v", cc.Consistency, cc.SerialConsistency, cc.PoolConfig.HostSelectionPolicy)
	}

	for _, tc := range []struct {
		name string
		mod  func(*CassandraOptions)
		want string
	}{
		{"empty password", func(c *CassandraOptions) { c.PasswordFile = write("empty", "\n") }, "is empty"},
		{"missing user file", func(c *CassandraOptions) { c.UsernameFile = filepath.Join(dir, "none") }, "--cassandra-username-file"},
		{"CA without PEM", func(c *CassandraOptions) { c.TLSCAFile = write("ca", "not a certificate") }, "no PEM certificate"},
		{"bad key pair", func(c *CassandraOptions) { c.TLSCertFile, c.TLSKeyFile = write("c", "x"), write("k", "y") }, "--cassandra-tls-cert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := c
			tc.mod(&bad)
			if _, err := bad.ClusterConfig(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
