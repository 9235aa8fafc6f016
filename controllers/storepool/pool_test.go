package storepool

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestTargetStringHidesSecrets(t *testing.T) {
	tg := Target{ContactPoints: []string{"db:9042"}, Keyspace: "baton", Username: "alice", Password: "s3cret", CA: []byte("x")}
	s := tg.String()
	if strings.Contains(s, "s3cret") || !strings.Contains(s, "alice") || !strings.Contains(s, "TLS") || !strings.Contains(s, "db:9042") {
		t.Errorf("String() = %q", s)
	}
}

func TestTargetConnectionErrors(t *testing.T) {
	base := Target{ContactPoints: []string{"db"}, Keyspace: "baton", Consistency: "QUORUM", SerialConsistency: "SERIAL"}
	for _, tc := range []struct {
		name string
		mod  func(*Target)
		want string
	}{
		{"bad consistency", func(t *Target) { t.Consistency = "MOST" }, "consistency"},
		{"bad serial", func(t *Target) { t.SerialConsistency = "NOPE" }, "serial consistency"},
		{"CA not PEM", func(t *Target) { t.CA = []byte("not pem") }, "no PEM certificate"},
		{"bad client cert", func(t *Target) { t.ClientCert, t.ClientKey = []byte("x"), []byte("y") }, "client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := base
			tc.mod(&tg)
			if _, err := tg.connection(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	c, err := base.connection()
	if err != nil || c.TLS != nil || c.Username != "" {
		t.Errorf("plain target: %+v, %v", c, err)
	}
}

func TestFailedConnectionIsNotKept(t *testing.T) {
	p := New()
	defer p.Close()
	// Nothing listens on port 1: the connection is refused at once.
	tg := Target{ContactPoints: []string{"127.0.0.1:1"}, Keyspace: "baton", Consistency: "QUORUM", SerialConsistency: "SERIAL"}
	_, err := p.Store(context.Background(), tg)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("error %v, want one naming the contact point", err)
	}
	if n := p.Len(); n != 0 {
		t.Errorf("%d pooled connections after a failure, want 0 (the next call must retry)", n)
	}
	bad := tg
	bad.Consistency = "MOST"
	if _, err := p.Store(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "consistency") {
		t.Errorf("bad consistency: %v", err)
	}
}

func TestClosedPool(t *testing.T) {
	p := New()
	p.Close()
	_, err := p.Store(context.Background(), Target{ContactPoints: []string{"127.0.0.1:1"}})
	if !errors.Is(err, ErrClosed) {
		t.Errorf("error %v, want ErrClosed", err)
	}
}
