package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/storepool"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// failingSource is a StoreSource whose Store always fails with err.
type failingSource struct{ err error }

func (s failingSource) Store(context.Context, *batonv1.DistributedLock) (lock.Store, error) {
	return nil, s.err
}

// TestStoreFailureSaysWhyAndWhen: a lock whose store is still connecting reads StoreReachable
// Unknown (Connecting) and is looked at again within a second; one whose connection failed and
// is left alone until a retry time reads StoreReachable False with why and when, and is
// reconciled again at that time rather than every interval; while it is tried again it still
// reads False with the last failure, and is looked at again within a second.
func TestStoreFailureSaysWhyAndWhen(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders"}},
	}
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	retryAt := now.Add(40 * time.Second)
	for _, tc := range []struct {
		name    string
		err     error
		status  metav1.ConditionStatus
		reason  string
		message []string
		requeue time.Duration
	}{
		{
			name:    "still connecting",
			err:     errors.Join(storepool.ErrConnecting, errors.New("to Cassandra [10.0.0.1:9042] keyspace baton (since 2026-11-27T11:59:59Z)")),
			status:  metav1.ConditionUnknown,
			reason:  controllers.ReasonConnecting,
			message: []string{"still connecting", "10.0.0.1:9042"},
			requeue: time.Second,
		},
		{
			name: "backing off",
			err: &storepool.RetryError{Target: "Cassandra [10.0.0.1:9042] keyspace baton", Failures: 3, Since: now.Add(-10 * time.Second),
				RetryAt: retryAt, Err: errors.New("connecting to Cassandra [10.0.0.1:9042] keyspace baton: no response to connection startup within timeout")},
			status:  metav1.ConditionFalse,
			reason:  controllers.ReasonStoreUnreachable,
			message: []string{"no response to connection startup", "3 failed attempt(s) in a row since 2026-11-27T11:59:50Z", "tries again at 2026-11-27T12:00:40Z"},
			requeue: 40 * time.Second,
		},
		{
			name: "trying again",
			err: &storepool.RetryError{Target: "Cassandra [10.0.0.1:9042] keyspace baton", Failures: 3, Since: now.Add(-10 * time.Second),
				RetryAt: now.Add(-time.Second), Trying: now.Add(-time.Second), Err: errors.New("no response to connection startup within timeout")},
			status:  metav1.ConditionFalse,
			reason:  controllers.ReasonStoreUnreachable,
			message: []string{"no response to connection startup", "3 failed attempt(s) in a row", "trying again since 2026-11-27T11:59:59Z"},
			requeue: time.Second,
		},
		{
			// The lock's own connection works but finds no schema, which the operator's own
			// connection would have created had its login not been refused: not this lock's
			// credentials, but the operator's chart value.
			name:    "no schema: the operator's login refused",
			err:     controllers.SchemaNotCreated(errLockNoSchema, errOperatorLogin),
			status:  metav1.ConditionFalse,
			reason:  controllers.ReasonStoreUnreachable,
			message: []string{"no keyspace baton", "cassandra.credentials", "and/or password are incorrect"},
			requeue: time.Hour,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &controllers.DistributedLockReconciler{Client: c, Recorder: &events{}, Interval: time.Hour,
				Stores: failingSource{tc.err}, Now: func() time.Time { return now }}
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)})
			if err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			if res.RequeueAfter != tc.requeue {
				t.Errorf("requeued after %v, want %v", res.RequeueAfter, tc.requeue)
			}
			got := &batonv1.DistributedLock{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
				t.Fatal(err)
			}
			cond := meta.FindStatusCondition(got.Status.Conditions, batonv1.ConditionStoreReachable)
			if cond == nil || cond.Status != tc.status || cond.Reason != tc.reason {
				t.Fatalf("StoreReachable %+v, want %s (%s)", cond, tc.status, tc.reason)
			}
			for _, want := range tc.message {
				if !strings.Contains(cond.Message, want) {
					t.Errorf("StoreReachable message %q lacks %q", cond.Message, want)
				}
			}
			if strings.Contains(cond.Message, "credentialsSecretRef") {
				t.Errorf("StoreReachable message %q sends the lock's author to its own credentials", cond.Message)
			}
			if meta.IsStatusConditionTrue(got.Status.Conditions, batonv1.ConditionReady) {
				t.Error("Ready is True while the store cannot be read")
			}
		})
	}
}

// The errors of a lock whose own connection finds no schema after the operator's own connection,
// which would have created it, was refused its login.
var (
	errLockNoSchema  = fmt.Errorf("Cassandra [10.0.0.1:9042] keyspace baton: %w: no keyspace baton", cassandrastore.ErrSchema)
	errOperatorLogin = cassandrastore.ClassifyConnectError(errors.New(
		"gocql: unable to create session: unable to connect to initial hosts: Provided username baton-operator and/or password are incorrect"))
)

// TestSchemaNotCreatedIsNotTheLocksLogin: when the operator's own connection (which creates the
// schema) fails and the lock's then finds no schema, the result is the lock's schema error; the
// operator's failure is only told, with the operator's settings to check, and is not in the
// lock's error chain, where it would read as Cassandra refusing the lock's credentials.
func TestSchemaNotCreatedIsNotTheLocksLogin(t *testing.T) {
	for _, own := range []error{errOperatorLogin, cassandrastore.ClassifyConnectError(errors.New(
		"gocql: unable to create session: unable to connect to initial hosts: tls: failed to verify certificate: x509: certificate signed by unknown authority"))} {
		err := controllers.SchemaNotCreated(errLockNoSchema, own)
		if !errors.Is(err, cassandrastore.ErrSchema) {
			t.Errorf("%v: not the lock's schema error", err)
		}
		if errors.Is(err, cassandrastore.ErrAuthentication) || errors.Is(err, cassandrastore.ErrServerNotTrusted) {
			t.Errorf("the operator's failure reads as the lock's own: %v", err)
		}
		for _, want := range []string{"cassandra.credentials", "cassandra.tls"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not name the operator's chart value %s", err, want)
			}
		}
		if strings.Contains(err.Error(), "credentialsSecretRef") || strings.Contains(err.Error(), "tlsSecretRef") {
			t.Errorf("%q sends the reader to a DistributedLock's Secrets for the operator's connection", err)
		}
	}
}
