package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/storepool"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

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
	// Defaults are the operator's own credentials and TLS material for its default contact points.
	// They are never sent to contact points a DistributedLock chose.
	Defaults cassandrastore.Credentials
}

var _ StoreSource = (*PoolSource)(nil)

// Store implements StoreSource.
func (s *PoolSource) Store(ctx context.Context, dl *batonv1.DistributedLock) (lock.Store, error) {
	conn, err := s.Connection(ctx, dl)
	if err != nil {
		return nil, err
	}
	return s.Pool.Store(ctx, conn)
}

// Connection resolves dl's lock store connection, reading the Secrets it names.
func (s *PoolSource) Connection(ctx context.Context, dl *batonv1.DistributedLock) (cassandrastore.Connection, error) {
	spec := s.Config.StoreConnection(dl)
	t := cassandrastore.Connection{ContactPoints: spec.ContactPoints, Keyspace: spec.Keyspace, LocalDC: spec.LocalDC}
	if len(t.ContactPoints) == 0 {
		return t, fmt.Errorf("no Cassandra contact points: set spec.cassandra.contactPoints or the operator's --cassandra-hosts")
	}
	var err error
	if t.Consistency, err = gocql.ParseConsistencyWrapper(string(spec.Consistency)); err != nil {
		return t, fmt.Errorf("consistency: %w", err)
	}
	if t.SerialConsistency, err = gocql.ParseConsistencyWrapper(string(spec.SerialConsistency)); err != nil {
		return t, fmt.Errorf("serial consistency: %w", err)
	}
	if slices.Equal(spec.ContactPoints, s.Config.Cassandra.ContactPoints) {
		t.Credentials = s.Defaults
	}
	if ref := spec.CredentialsSecretRef; ref != nil {
		data, err := s.secret(ctx, dl.Namespace, ref.Name)
		if err != nil {
			return t, err
		}
		if t.Username, err = secretKey(data, dl.Namespace, ref.Name, cmp.Or(ref.UsernameKey, "username")); err != nil {
			return t, err
		}
		if t.Password, err = secretKey(data, dl.Namespace, ref.Name, cmp.Or(ref.PasswordKey, "password")); err != nil {
			return t, err
		}
	}
	if ref := spec.TLSSecretRef; ref != nil {
		data, err := s.secret(ctx, dl.Namespace, ref.Name)
		if err != nil {
			return t, err
		}
		tls := &cassandrastore.TLS{CA: data[cmp.Or(ref.CAKey, "ca.crt")], Cert: data[cmp.Or(ref.CertKey, "tls.crt")], Key: data[cmp.Or(ref.KeyKey, "tls.key")]}
		if len(tls.Cert) == 0 || len(tls.Key) == 0 {
			tls.Cert, tls.Key = nil, nil // CA only: no client certificate, as in the sidecar
		}
		if len(tls.CA) == 0 && len(tls.Cert) == 0 {
			return t, fmt.Errorf("Secret %s/%s (spec.cassandra.tlsSecretRef) holds neither key %q nor a client certificate",
				dl.Namespace, ref.Name, cmp.Or(ref.CAKey, "ca.crt"))
		}
		t.TLS = tls
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
