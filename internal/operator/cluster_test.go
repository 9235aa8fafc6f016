package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// clusterName is the cluster_name of the test Cassandra (localcassandra names it baton-<Name>).
const clusterName = "baton-operator-single"

// TestClusterIdentity: the operator records the Cassandra cluster a lock lives on at its first
// read, the webhook hands it to every new sidecar, and when the lock's contact points reach
// another cluster (here: the record names a cluster these contact points do not reach) the
// operator neither reads nor revokes there and says why, and a new pod's sidecar refuses to start.
func TestClusterIdentity(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "cluster")
	dl := newLock(ns, "orders")
	create(t, env, dl)
	key := client.ObjectKeyFromObject(dl)
	get := func() *batonv1.DistributedLock {
		t.Helper()
		got := &batonv1.DistributedLock{}
		if err := env.Client.Get(context.Background(), key, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	testenv.WaitFor(t, "the lock's Cassandra cluster recorded", 60*time.Second, func() bool {
		return get().Status.CassandraClusterName != ""
	})
	if got := get().Status.CassandraClusterName; got != clusterName {
		t.Fatalf("status.cassandraClusterName %q, want %q", got, clusterName)
	}

	pod := appPod(ns, "web-a", "orders")
	create(t, env, pod)
	if v := sidecarEnv(pod, "BATON_CASSANDRA_CLUSTER_NAME"); v != clusterName {
		t.Errorf("the sidecar of web-a gets cluster name %q, want %q", v, clusterName)
	}
	a := sidecarOf(t, env, ns, "web-a")
	held := waitLock(t, env, ns, "orders", "web-a holds orders", func(s batonv1.LockStatus) bool { return s.Holder == "web-a" })

	// The lock lives on another cluster than the one its contact points now reach.
	const elsewhere = "baton-elsewhere"
	cur := get()
	cur.Status.CassandraClusterName = elsewhere
	if err := env.Client.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	c := waitCondition(t, env, ns, "orders", batonv1.ConditionStoreReachable, metav1.ConditionFalse, controllers.ReasonClusterMismatch)
	for _, want := range []string{`lives on Cassandra cluster "baton-elsewhere"`, `reach cluster "` + clusterName + `"`, "create a new DistributedLock"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("StoreReachable message %q lacks %q", c.Message, want)
		}
	}
	waitCondition(t, env, ns, "orders", batonv1.ConditionReady, metav1.ConditionFalse, controllers.ReasonClusterMismatch)
	waitEvent(t, env, ns, "orders", controllers.ReasonClusterMismatch, `lives on Cassandra cluster "baton-elsewhere"`)

	// Nothing is revoked on the wrong cluster: the annotation waits, web-a keeps its grant.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"orders"}}}`, batonv1.AnnotationRevoke)
	if err := env.Client.Patch(context.Background(), cur, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	// A new pod's sidecar is told the recorded cluster and refuses the one it reaches.
	create(t, env, appPod(ns, "web-b", "orders"))
	b, err := env.Agent.Sidecar(context.Background(), ns, "web-b")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("web-b's sidecar runs on a cluster other than the lock's")
	}
	if out := sidecarLog.String(); !strings.Contains(out, ns+"/web-b: ") || !strings.Contains(out, "refusing to start") ||
		!strings.Contains(out, `the lock lives on Cassandra cluster \"baton-elsewhere\"`) {
		t.Errorf("web-b's sidecar log does not say why it stopped:\n%s", out)
	}
	// Reconciles that saw the annotation (a spec change makes one observable) leave the record,
	// the annotation and web-a's grant alone.
	for _, policy := range []batonv1.TrafficPolicy{batonv1.TrafficNone, batonv1.TrafficReadinessGate} {
		cur = get()
		cur.Spec.TrafficPolicy = policy
		if err := env.Client.Update(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the operator to reconcile the changed spec", 30*time.Second, func() bool {
			got := get()
			return got.Status.ObservedGeneration == cur.Generation
		})
	}
	got := get()
	if got.Status.CassandraClusterName != elsewhere {
		t.Errorf("the operator changed the recorded cluster to %q", got.Status.CassandraClusterName)
	}
	if v, ok := got.Annotations[batonv1.AnnotationRevoke]; !ok || v != "orders" {
		t.Errorf("the revoke annotation was acted upon on the wrong cluster: %q (present %v)", v, ok)
	}
	if l := got.Status.Locks[0]; l.LastRevocation != nil {
		t.Errorf("a revocation was recorded on the wrong cluster: %+v", l.LastRevocation)
	}
	if c := findCondition(got, batonv1.ConditionStoreReachable); c == nil || c.Reason != controllers.ReasonClusterMismatch {
		t.Errorf("StoreReachable %+v, want still ClusterMismatch", c)
	}
	st, err := a.Client.Lock(context.Background(), "orders")
	if err != nil || st.State != sidecarclient.StateHeld || st.Token != held.Token {
		t.Errorf("web-a's grant: %+v, %v; want still held with token %d", st, err, held.Token)
	}
}

func findCondition(dl *batonv1.DistributedLock, typ string) *metav1.Condition {
	for i := range dl.Status.Conditions {
		if dl.Status.Conditions[i].Type == typ {
			return &dl.Status.Conditions[i]
		}
	}
	return nil
}

// sidecarEnv returns the value of the baton container's variable name in an admitted pod.
func sidecarEnv(pod *corev1.Pod, name string) string {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name != inject.ContainerName {
				continue
			}
			for _, e := range c.Env {
				if e.Name == name {
					return e.Value
				}
			}
		}
	}
	return ""
}
