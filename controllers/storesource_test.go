package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/storepool"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/lock/memstore"
)

// operatorLogin is the operator's own Cassandra login in these tests.
var operatorLogin = login{"baton-operator", "operator-s3cret"}

// deputy is an operator's lock store source on the real API server, as internal/operator wires
// it, with everything the reconciler and the pool log and emit captured.
type deputy struct {
	c      client.Client
	ns     string
	src    *controllers.PoolSource
	stores controllers.StoreSource // what the reconciler reads through: src unless a test sets it
	events *events
	log    *testenv.SyncBuffer
}

// newDeputy returns an operator whose default contact points are defaultHosts (its own keyspace
// "baton", its own login operatorLogin) in a fresh namespace.
func newDeputy(t *testing.T, defaultHosts ...string) *deputy {
	t.Helper()
	c := kube.RuntimeClient(t, batonv1.AddToScheme)
	d := &deputy{c: c, ns: testenv.Namespace(t, c, "deputy-"), events: &events{}, log: &testenv.SyncBuffer{}}
	logger := funcr.New(func(prefix, args string) { fmt.Fprintln(d.log, prefix, args) }, funcr.Options{Verbosity: 1})
	pool := storepool.New(storepool.WithLogger(logger))
	t.Cleanup(pool.Close)
	cfg := inject.Config{Image: "baton:test"}
	cfg.Cassandra.ContactPoints, cfg.Cassandra.Keyspace = defaultHosts, "baton"
	d.src = &controllers.PoolSource{Pool: pool, Secrets: c, Config: cfg,
		Defaults: cassandrastore.Credentials{Username: operatorLogin.user, Password: operatorLogin.password}}
	return d
}

// secret creates a Secret of the test namespace with data, and labels.
func (d *deputy) secret(t *testing.T, name string, data, labels map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: name, Labels: labels}, StringData: data}
	if err := d.c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// reconcile creates a DistributedLock with connection conn, reconciles it once as the controller
// would and returns it as written back.
func (d *deputy) reconcile(t *testing.T, name string, conn *batonv1.CassandraConnection) *batonv1.DistributedLock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: d.ns, Name: name},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{name}, Cassandra: conn}}
	if err := d.c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	var stores controllers.StoreSource = d.src
	if d.stores != nil {
		stores = d.stores
	}
	r := &controllers.DistributedLockReconciler{Client: d.c, Stores: stores, Recorder: d.events, Config: d.src.Config, Interval: time.Hour}
	logger := funcr.New(func(prefix, args string) { fmt.Fprintln(d.log, prefix, args) }, funcr.Options{Verbosity: 1})
	if _, err := r.Reconcile(logf.IntoContext(ctx, logger), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Get(ctx, client.ObjectKeyFromObject(dl), dl); err != nil {
		t.Fatal(err)
	}
	return dl
}

// conditions returns dl's conditions, one a line.
func conditions(dl *batonv1.DistributedLock) string {
	var b strings.Builder
	for _, c := range dl.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

// TestNoCredentialsToAServerTheLockNames: a DistributedLock author who may not read the Secrets of
// the namespace names one of them (with key names of their choosing) and a server of their own as
// contact point. The operator must not send that Secret, nor its own login, to the server: it
// makes no connection at all.
func TestNoCredentialsToAServerTheLockNames(t *testing.T) {
	evil := newFakeCQL(t)
	d := newDeputy(t, "cassandra.baton-system.svc:9042")
	d.secret(t, "payments-db", map[string]string{"db-user": "payments", "db-pass": "payments-s3cret"}, nil)
	dl := d.reconcile(t, "steal", &batonv1.CassandraConnection{ContactPoints: []string{evil.addr()},
		CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "payments-db", UsernameKey: "db-user", PasswordKey: "db-pass"}})

	if conns, logins := evil.received(); conns != 0 || len(logins) != 0 {
		t.Errorf("the server the lock named got %d connection(s) and the logins %v; want none", conns, logins)
	}
	if !strings.Contains(conditions(dl), "not on the operator's allow-list") {
		t.Errorf("conditions do not say why the contact point was refused:\n%s", conditions(dl))
	}
}

// TestOperatorLoginNeverServesALock: a lock that brings no credentials gets no connection with
// the operator's login, not even in the operator's own keyspace on its own contact points (its
// sidecars would connect without a login); it is refused with a message that says what to add.
// With the schema to create, a lock that brings its own login makes the operator log in with its
// own first (for the schema), then with the lock's (for its status).
func TestOperatorLoginNeverServesALock(t *testing.T) {
	db := newFakeCQL(t)
	d := newDeputy(t, db.addr())
	for name, conn := range map[string]*batonv1.CassandraConnection{"own": nil, "other": {Keyspace: "someone_else"}} {
		dl := d.reconcile(t, name, conn)
		if _, logins := db.received(); len(logins) != 0 {
			t.Errorf("lock %s without credentials made the operator log in: %v", name, logins)
		}
		if !strings.Contains(conditions(dl), "ConnectionNotAllowed: ") || !strings.Contains(conditions(dl), "credentialsSecretRef") {
			t.Errorf("lock %s: conditions do not say the lock needs credentials:\n%s", name, conditions(dl))
		}
	}
	d.src.EnsureSchema = true
	d.secret(t, "creds", map[string]string{"username": "tenant", "password": "tenant-s3cret"},
		map[string]string{"baton.dev/cassandra-secret": "true"})
	d.reconcile(t, "with-login", &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "creds"}})
	if _, logins := db.received(); len(logins) != 2 || logins[0] != operatorLogin || logins[1] != (login{"tenant", "tenant-s3cret"}) {
		t.Errorf("logins %v, want the operator's (for the schema), then the lock's", logins)
	}
}

// TestSecretsOptInByLabel: the operator uses a Secret only when it carries the label
// baton.dev/cassandra-secret=true, which whoever manages the Secret sets.
func TestSecretsOptInByLabel(t *testing.T) {
	db := newFakeCQL(t)
	d := newDeputy(t, db.addr())
	d.secret(t, "unlabelled", map[string]string{"username": "tenant", "password": "unlabelled-s3cret"}, nil)
	d.secret(t, "labelled", map[string]string{"username": "tenant", "password": "labelled-s3cret"},
		map[string]string{"baton.dev/cassandra-secret": "true"})

	dl := d.reconcile(t, "unlabelled", &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "unlabelled"}})
	if _, logins := db.received(); len(logins) != 0 {
		t.Errorf("the operator used a Secret without the opt-in label: logins %v", logins)
	}
	if !strings.Contains(conditions(dl), "baton.dev/cassandra-secret=true") {
		t.Errorf("conditions do not name the missing label:\n%s", conditions(dl))
	}
	d.reconcile(t, "labelled", &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "labelled"}})
	if _, logins := db.received(); len(logins) != 1 || logins[0] != (login{"tenant", "labelled-s3cret"}) {
		t.Errorf("the labelled Secret: logins %v, want tenant's", logins)
	}
}

// TestNoSecretInStatusEventsOrLogs: a login that Cassandra refuses (its message names the user)
// leaves neither the user name nor the password in the lock's status, its Events or the log.
func TestNoSecretInStatusEventsOrLogs(t *testing.T) {
	db := newFakeCQL(t)
	d := newDeputy(t, db.addr())
	d.secret(t, "creds", map[string]string{"username": "tenant-alice", "password": "alice-s3cret"},
		map[string]string{"baton.dev/cassandra-secret": "true"})
	dl := d.reconcile(t, "refused", &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "creds"}})
	if _, logins := db.received(); len(logins) != 1 {
		t.Fatalf("logins %v, want the one of Secret creds", logins)
	}
	for what, text := range map[string]string{"status": conditions(dl), "events": d.events.String(), "log": d.log.String()} {
		for _, secret := range []string{"tenant-alice", operatorLogin.user, "alice-s3cret", operatorLogin.password} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s shows %q:\n%s", what, secret, text)
			}
		}
	}
	if !strings.Contains(conditions(dl), "StoreReachable=False") {
		t.Errorf("conditions do not report the refused login:\n%s", conditions(dl))
	}
}

// readsFail is a StoreSource whose stores fail every read with err, as a Cassandra does that
// refuses the lock's role a permission after the session was opened. It is the PoolSource for
// everything else (Redact included).
type readsFail struct {
	*controllers.PoolSource
	err error
}

func (f readsFail) Store(ctx context.Context, dl *batonv1.DistributedLock) (lock.Store, error) {
	return failingStore{Store: memstore.New().Client(1, memstore.Faults{}), err: f.err}, nil
}

// failingStore is an in-memory store (a test fake) whose reads fail with err.
type failingStore struct {
	lock.Store
	err error
}

func (f failingStore) Load(context.Context, string, bool) (lock.Record, bool, error) {
	return lock.Record{}, false, f.err
}

// TestStoreErrorsAreRedacted: an error of an open session that quotes the lock's Cassandra role
// (a permission refused after the connection was made) reaches status, Events and the log
// without the role's name.
func TestStoreErrorsAreRedacted(t *testing.T) {
	db := newFakeCQL(t)
	d := newDeputy(t, db.addr())
	d.secret(t, "creds", map[string]string{"username": "tenant-bob", "password": "bob-s3cret"},
		map[string]string{"baton.dev/cassandra-secret": "true"})
	refused := errors.New("User tenant-bob has no SELECT permission on <table baton.lock_owner> or any of its parents")
	d.stores = readsFail{PoolSource: d.src, err: refused}
	dl := d.reconcile(t, "refused-read", &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "creds"}})
	for what, text := range map[string]string{"status": conditions(dl), "events": d.events.String(), "log": d.log.String()} {
		if strings.Contains(text, "tenant-bob") {
			t.Errorf("the %s shows the role tenant-bob:\n%s", what, text)
		}
	}
	if !strings.Contains(conditions(dl), "has no SELECT permission") {
		t.Errorf("conditions do not report the refused read:\n%s", conditions(dl))
	}
}
