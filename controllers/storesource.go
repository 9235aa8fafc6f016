package controllers

import (
	"bytes"
	"cmp"
	"context"
	"errors"
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

// errConnectionNotAllowed is returned (wrapped) for a DistributedLock whose lock store connection
// the operator refuses to make: a contact point off its allow-list, a Secret that did not opt in,
// or no credentials at all when anonymous Cassandra is not allowed. The operator makes no
// connection for such a lock.
var errConnectionNotAllowed = errors.New("connection not allowed")

// PoolSource is the operator's StoreSource: it resolves a DistributedLock's connection (the
// operator's defaults overridden by spec.cassandra, Secrets read from the lock's namespace),
// checks it against the operator's policy and takes the session from a pool.
//
// The connection is the one the lock's sidecars make, credentials and TLS included, so the
// lock's status says what its sidecars see: the operator's own credentials (Defaults) never
// serve a lock, they only create the schema in the operator's keyspaces (see Store).
//
// The policy keeps the operator from being used against its users (a confused deputy) and the
// sidecars from connecting in a way that cannot work: it connects only to contact points on its
// allow-list, uses only Secrets labelled batonv1.LabelCassandraSecret=true, refuses a connection
// without credentials unless AllowAnonymous, and refuses a connection in clear text to its own
// contact points when it reaches them over TLS. The webhook asks the same policy (Refuses) before
// it injects a sidecar. The zero value of each policy field is the strict setting. It does not
// guarantee that a Secret's owner meant it for this particular lock: any DistributedLock of the
// namespace may name a labelled Secret.
type PoolSource struct {
	Pool *storepool.Pool
	// Secrets reads the Secrets named by spec.cassandra; an uncached reader (the manager's API
	// reader), so the operator does not cache every Secret of the cluster.
	Secrets client.Reader
	// Config holds the default connection.
	Config inject.Config
	// Defaults are the operator's own credentials and TLS material for its default contact points
	// and keyspaces (see OperatorKeyspaces). The operator uses them only to create the schema
	// there (with EnsureSchema), never for a DistributedLock's reads or revocations, never on
	// contact points a DistributedLock chose, and they never reach a sidecar.
	Defaults cassandrastore.Credentials
	// EnsureSchema makes Store open the operator's own connection (Defaults) to a lock's keyspace
	// before the lock's, when that keyspace is one of the operator's, so that the pool creates the
	// schema with the operator's rights (storepool.WithEnsureSchema with EnsuresSchema) rather
	// than the lock's. Set it when the pool ensures the schema.
	EnsureSchema bool
	// AllowedContactPoints are the contact points a DistributedLock may use, each "host" (port
	// 9042) or "host:port"; "*" allows any (the operator then sends a lock's credentials wherever
	// its author says). Empty: only the default contact points (Config.Cassandra.ContactPoints).
	AllowedContactPoints []string
	// OperatorKeyspaces are the keyspaces in which the operator uses Defaults on its default
	// contact points and may create the schema (see EnsuresSchema). Empty: only the default
	// keyspace (Config.Cassandra.Keyspace, "baton" when unset).
	OperatorKeyspaces []string
	// AllowAnonymous lets a connection carry no credentials (no password login, no client
	// certificate): for a Cassandra without authentication, in development. Without it such a
	// DistributedLock is refused.
	AllowAnonymous bool
}

var _ StoreSource = (*PoolSource)(nil)

// Store implements StoreSource: the store of dl's own connection, as its sidecars make it. In
// one of the operator's keyspaces, with EnsureSchema, it first opens the operator's own
// connection there, which creates the schema; a failure of that is reported only when the
// lock's connection then finds no schema. Its errors never show a user name or password.
func (s *PoolSource) Store(ctx context.Context, dl *batonv1.DistributedLock) (lock.Store, error) {
	conn, err := s.Connection(ctx, dl)
	if err != nil {
		return nil, err
	}
	var schemaErr error
	if own := s.own(conn); s.EnsureSchema && s.Owns(conn) && !sameCredentials(own.Credentials, conn.Credentials) {
		_, schemaErr = s.Pool.Store(ctx, own)
	}
	store, err := s.Pool.Store(ctx, conn)
	if err != nil {
		if schemaErr != nil && errors.Is(err, cassandrastore.ErrSchema) {
			err = schemaNotCreated(err, s.Defaults.Redact(schemaErr))
		}
		// Cassandra names the user in a refused login; the error lands in status and Events.
		return nil, conn.Redact(err)
	}
	return store, nil
}

// schemaNotCreated is err, the lock's own connection's (it found no schema), told with own, the
// failure of the operator's own connection that would have created the schema. own is text only,
// not in err's chain: Cassandra refusing the operator's login is not refusing the lock's
// (storeFailed would report AuthenticationFailed), and its hint names the operator's settings
// (chart values cassandra.credentials and cassandra.tls) rather than a DistributedLock's Secrets.
func schemaNotCreated(err, own error) error {
	return fmt.Errorf("%w (the operator creates the schema with its own connection, which failed: %s)", err, operatorConnectHint(own))
}

// operatorConnectHint is the text of err, a failure of the operator's own connection, with the
// operator's settings to check in place of cassandrastore's hint, which names a DistributedLock's.
// It does not redact: pass it an error without credentials in it.
func operatorConnectHint(err error) string {
	const settings = "the operator's chart values cassandra.credentials (user name and password) and cassandra.tls (CA, client certificate, serverName)"
	switch {
	case errors.Is(err, cassandrastore.ErrAuthentication):
		return fmt.Sprintf("Cassandra refused the operator's login or client certificate: check %s: %v", settings, driverError(err))
	case errors.Is(err, cassandrastore.ErrServerNotTrusted):
		return fmt.Sprintf("the Cassandra server's TLS certificate is not trusted: check %s: %v", settings, driverError(err))
	}
	return fmt.Sprintf("%v; check %s", err, settings)
}

// driverError is the error cassandrastore.ClassifyConnectError wrapped in err (the driver's own,
// without the classification's hint), or err when there is none.
func driverError(err error) error {
	for e := err; e != nil; {
		if m, ok := e.(interface{ Unwrap() []error }); ok {
			errs := m.Unwrap()
			if len(errs) == 2 && (errs[0] == cassandrastore.ErrAuthentication || errs[0] == cassandrastore.ErrServerNotTrusted) {
				return errs[1]
			}
			return err
		}
		e = errors.Unwrap(e)
	}
	return err
}

// own returns conn with the operator's own credentials instead of the lock's, on the operator's
// own contact points: a lock that names one of them among other hosts does not get the operator's
// login sent to those others.
func (s *PoolSource) own(conn cassandrastore.Connection) cassandrastore.Connection {
	conn.Credentials = s.Defaults
	conn.ContactPoints = s.Config.Cassandra.ContactPoints
	return conn
}

// sameCredentials says whether a and b log in and verify alike.
func sameCredentials(a, b cassandrastore.Credentials) bool {
	if a.Username != b.Username || a.Password != b.Password || (a.TLS == nil) != (b.TLS == nil) {
		return false
	}
	return a.TLS == nil || (bytes.Equal(a.TLS.CA, b.TLS.CA) && bytes.Equal(a.TLS.Cert, b.TLS.Cert) &&
		bytes.Equal(a.TLS.Key, b.TLS.Key) && a.TLS.ServerName == b.TLS.ServerName)
}

// Refuses returns why the operator's policy refuses dl's lock store connection (an error wrapping
// errConnectionNotAllowed), or nil when it allows it or cannot tell (a Secret could not be read,
// a setting is malformed: the sidecar reports those itself). The webhook asks it before it
// injects a sidecar that would make that connection.
func (s *PoolSource) Refuses(ctx context.Context, dl *batonv1.DistributedLock) error {
	if _, err := s.Connection(ctx, dl); errors.Is(err, errConnectionNotAllowed) {
		return err
	}
	return nil
}

// Redact implements errorRedactor: err without the user name and password of dl's connection.
// When the connection cannot be resolved again (a Secret changed or could not be read), it cannot
// tell what to remove and withholds err's text altogether (errors.Is and As still see err).
func (s *PoolSource) Redact(ctx context.Context, dl *batonv1.DistributedLock, err error) error {
	if err == nil {
		return nil
	}
	conn, cerr := s.Connection(ctx, dl)
	if cerr != nil {
		return &withheldError{err: err, why: cerr}
	}
	return conn.Redact(err)
}

// withheldError is an error whose text is not shown, because it may quote credentials that could
// not be told.
type withheldError struct{ err, why error }

func (e *withheldError) Error() string {
	return fmt.Sprintf("the lock store failed; its error is withheld, since the connection's credentials could not be read to redact it (%v)", e.why)
}

func (e *withheldError) Unwrap() error { return e.err }

// Connection resolves dl's lock store connection, reading the Secrets it names, and checks it
// against the operator's policy (errors wrapping errConnectionNotAllowed).
func (s *PoolSource) Connection(ctx context.Context, dl *batonv1.DistributedLock) (cassandrastore.Connection, error) {
	spec := s.Config.StoreConnection(dl)
	t := cassandrastore.Connection{ContactPoints: spec.ContactPoints, Keyspace: spec.Keyspace, LocalDC: spec.LocalDC}
	if len(t.ContactPoints) == 0 {
		return t, fmt.Errorf("no Cassandra contact points: set spec.cassandra.contactPoints or the operator's --cassandra-hosts")
	}
	if err := s.checkContactPoints(t.ContactPoints); err != nil {
		return t, err
	}
	var err error
	if t.Consistency, err = gocql.ParseConsistencyWrapper(string(spec.Consistency)); err != nil {
		return t, fmt.Errorf("consistency: %w", err)
	}
	if t.SerialConsistency, err = gocql.ParseConsistencyWrapper(string(spec.SerialConsistency)); err != nil {
		return t, fmt.Errorf("serial consistency: %w", err)
	}
	if ref := spec.CredentialsSecretRef; ref != nil {
		data, err := s.secret(ctx, dl.Namespace, ref.Name, "credentialsSecretRef")
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
		data, err := s.secret(ctx, dl.Namespace, ref.Name, "tlsSecretRef")
		if err != nil {
			return t, err
		}
		tls := &cassandrastore.TLS{CA: data[cmp.Or(ref.CAKey, "ca.crt")], Cert: data[cmp.Or(ref.CertKey, "tls.crt")], Key: data[cmp.Or(ref.KeyKey, "tls.key")],
			ServerName: spec.TLSServerName}
		if len(tls.Cert) == 0 || len(tls.Key) == 0 {
			tls.Cert, tls.Key = nil, nil // CA only: no client certificate, as in the sidecar
		}
		if len(tls.CA) == 0 && len(tls.Cert) == 0 {
			return t, fmt.Errorf("Secret %s/%s (spec.cassandra.tlsSecretRef) holds neither key %q nor a client certificate",
				dl.Namespace, ref.Name, cmp.Or(ref.CAKey, "ca.crt"))
		}
		t.TLS = tls
	}
	if t.TLS == nil && s.Defaults.TLS != nil && inject.OnOperatorServers(t.ContactPoints, s.Config.Cassandra.ContactPoints) {
		return t, fmt.Errorf("%w: the operator reaches its Cassandra %v over TLS, and this lock's sidecars would connect without: "+
			"put the CA that signs the servers' certificates (key ca.crt) in a Secret labelled %s=true, e.g. the credentials Secret, "+
			"and name it in spec.cassandra.tlsSecretRef", errConnectionNotAllowed, t.ContactPoints, batonv1.LabelCassandraSecret)
	}
	if !s.AllowAnonymous && t.Username == "" && (t.TLS == nil || len(t.TLS.Cert) == 0) {
		return t, fmt.Errorf("%w: no Cassandra credentials for keyspace %s: this lock's sidecars would connect without a login. "+
			"Name a Secret labelled %s=true holding username and password in spec.cassandra.credentialsSecretRef (or a client certificate in tlsSecretRef); "+
			"the operator's own credentials never reach the sidecars, and connections without credentials need the operator's --cassandra-allow-anonymous",
			errConnectionNotAllowed, cmp.Or(t.Keyspace, cassandrastore.DefaultKeyspace), batonv1.LabelCassandraSecret)
	}
	return t, nil
}

// Owns says whether conn is one of the operator's own: on its servers (any of its default contact
// points, however spelled: inject.OnOperatorServers) and in one of its keyspaces. Only there does
// it use its own credentials, to create the schema (EnsuresSchema), and then only on its own
// contact points (see own), never on the other hosts conn may also name.
func (s *PoolSource) Owns(conn cassandrastore.Connection) bool {
	return inject.OnOperatorServers(conn.ContactPoints, s.Config.Cassandra.ContactPoints) &&
		slices.Contains(s.operatorKeyspaces(), cmp.Or(conn.Keyspace, cassandrastore.DefaultKeyspace))
}

// EnsuresSchema is the pool's schema predicate (storepool.WithEnsureSchema): the operator creates
// a keyspace and its tables only on its own connections (Owns) with its own credentials, never in
// a keyspace a DistributedLock chose, nor with a lock's credentials.
func (s *PoolSource) EnsuresSchema(conn cassandrastore.Connection) bool {
	return s.Owns(conn) && conn.Username == s.Defaults.Username && conn.Password == s.Defaults.Password && conn.TLS == s.Defaults.TLS
}

func (s *PoolSource) operatorKeyspaces() []string {
	if len(s.OperatorKeyspaces) > 0 {
		return s.OperatorKeyspaces
	}
	return []string{cmp.Or(s.Config.Cassandra.Keyspace, cassandrastore.DefaultKeyspace)}
}

// checkContactPoints refuses contact points off the allow-list.
func (s *PoolSource) checkContactPoints(hosts []string) error {
	allowed := s.AllowedContactPoints
	if len(allowed) == 0 {
		allowed = s.Config.Cassandra.ContactPoints
	}
	if slices.Contains(allowed, "*") {
		return nil
	}
	var refused []string
	for _, h := range hosts {
		if !slices.ContainsFunc(allowed, func(a string) bool { return inject.NormalHost(a) == inject.NormalHost(h) }) {
			refused = append(refused, h)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("%w: contact point(s) %v are not on the operator's allow-list %v: the operator sends credentials only to Cassandra servers "+
		"its administrator listed (--cassandra-allowed-hosts); use those, or ask the administrator to add yours", errConnectionNotAllowed, refused, allowed)
}

// secret reads Secret ns/name for field (of spec.cassandra), which must carry the opt-in label. A
// missing Secret and one without the label give the same message: the author of a DistributedLock
// learns nothing about Secrets they may not read.
func (s *PoolSource) secret(ctx context.Context, ns, name, field string) (map[string][]byte, error) {
	var sec corev1.Secret
	err := s.Secrets.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &sec)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	if err != nil || sec.Labels[batonv1.LabelCassandraSecret] != "true" {
		return nil, fmt.Errorf("%w: Secret %s/%s named in spec.cassandra.%s does not exist or lacks the label %s=true, "+
			"by which whoever manages a Secret lets the operator use it for Cassandra", errConnectionNotAllowed, ns, name, field, batonv1.LabelCassandraSecret)
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
