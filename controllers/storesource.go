package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/inject"
	"github.com/baton-dev/baton/controllers/storepool"
	"github.com/baton-dev/baton/lock"
)

// Credentials are Cassandra credentials and TLS material in memory.
type Credentials struct {
	Username, Password        string
	CA, ClientCert, ClientKey []byte // PEM
}

// PoolSource is the operator's StoreSource: it resolves a DistributedLock's connection (the
// operator's defaults overridden by spec.cassandra, Secrets read from the lock's namespace) and
// takes the session from a pool.
type PoolSource struct {
	Pool *storepool.Pool
	// Secrets reads the Secrets named by spec.cassandra; an uncached reader (the manager's API
	// reader), so the operator does not cache every Secret of the cluster.
	Secrets client.Reader
	// Config holds the default connection.
	Config inject.Config
	// Defaults are the operator's own credentials for its default contact points. They are never
	// sent to contact points a DistributedLock chose.
	Defaults Credentials
}

var _ StoreSource = (*PoolSource)(nil)

// Store implements StoreSource.
func (s *PoolSource) Store(ctx context.Context, dl *batonv1.DistributedLock) (lock.Store, error) {
	t, err := s.Target(ctx, dl)
	if err != nil {
		return nil, err
	}
	return s.Pool.Store(ctx, t)
}

// Target resolves dl's lock store connection.
func (s *PoolSource) Target(ctx context.Context, dl *batonv1.DistributedLock) (storepool.Target, error) {
	conn := s.Config.StoreConnection(dl)
	t := storepool.Target{
		ContactPoints: conn.ContactPoints, Keyspace: conn.Keyspace, LocalDC: conn.LocalDC,
		Consistency: string(conn.Consistency), SerialConsistency: string(conn.SerialConsistency),
	}
	if len(t.ContactPoints) == 0 {
		return t, fmt.Errorf("no Cassandra contact points: set spec.cassandra.contactPoints or the operator's --cassandra-hosts")
	}
	if slices.Equal(conn.ContactPoints, s.Config.Cassandra.ContactPoints) {
		d := s.Defaults
		t.Username, t.Password, t.CA, t.ClientCert, t.ClientKey = d.Username, d.Password, d.CA, d.ClientCert, d.ClientKey
	}
	if ref := conn.Credentials; ref != nil {
		data, err := s.secret(ctx, dl.Namespace, ref.Name)
		if err != nil {
			return t, err
		}
		if t.Username, err = secretKey(data, dl.Namespace, ref.Name, or(ref.UsernameKey, "username")); err != nil {
			return t, err
		}
		if t.Password, err = secretKey(data, dl.Namespace, ref.Name, or(ref.PasswordKey, "password")); err != nil {
			return t, err
		}
	}
	if ref := conn.TLS; ref != nil {
		data, err := s.secret(ctx, dl.Namespace, ref.Name)
		if err != nil {
			return t, err
		}
		t.CA, t.ClientCert, t.ClientKey = data[or(ref.CAKey, "ca.crt")], data[or(ref.CertKey, "tls.crt")], data[or(ref.KeyKey, "tls.key")]
		if len(t.ClientCert) == 0 || len(t.ClientKey) == 0 {
			t.ClientCert, t.ClientKey = nil, nil // CA only: no client certificate, as in the sidecar
		}
		if len(t.CA) == 0 && len(t.ClientCert) == 0 {
			return t, fmt.Errorf("Secret %s/%s (spec.cassandra.tlsSecretRef) holds neither key %q nor a client certificate",
				dl.Namespace, ref.Name, or(ref.CAKey, "ca.crt"))
		}
	}
	return t, nil
}

func (s *PoolSource) secret(ctx context.Context, ns, name string) (map[string][]byte, error) {
	var sec corev1.Secret
	if err := s.Secrets.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("Secret %s/%s named in spec.cassandra not found: %w", ns, name, err)
		}
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	return sec.Data, nil
}

func secretKey(data map[string][]byte, ns, name, key string) (string, error) {
	v := string(data[key])
	if v == "" {
		return "", fmt.Errorf("Secret %s/%s has no key %q (or it is empty)", ns, name, key)
	}
	return v, nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
