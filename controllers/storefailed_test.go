package controllers_test

import (
	"context"
	"errors"
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
			if meta.IsStatusConditionTrue(got.Status.Conditions, batonv1.ConditionReady) {
				t.Error("Ready is True while the store cannot be read")
			}
		})
	}
}
