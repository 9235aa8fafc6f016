package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecar"
	"github.com/baton-dev/baton/sidecarclient"
)

// unreachableStore is a Cassandra contact point on the operator's allow-list (batonCluster) where
// nothing listens: the node's address on the pod bridge, port 1 (tcpmux, which nothing on these
// machines serves; TestUnreachableStoreOnTheNode checks that before relying on it). Pods and the
// operator reach the address, and the node's kernel refuses the connection at once.
var unreachableStore = net.JoinHostPort(localnode.HostIP, "1")

// failedAttempts reads the count of failed attempts in a row from the operator's StoreReachable
// message (storepool.RetryError).
var failedAttempts = regexp.MustCompile(`\((\d+) failed attempt\(s\) in a row`)

// TestUnreachableStoreOnTheNode (issue 25, item 6, on the real node): a DistributedLock whose
// Cassandra contact point refuses every connection. Its pod's sidecar serves its socket anyway and
// answers every request 503 "starting" with what it waits for and its last error; the kubelet's
// startup probe (baton wait) fails with that message, which the pod's Events show; the pod's
// condition baton.dev/lock-held is False with reason WaitingForStore and the same message; and
// the operator sets StoreReachable False with reason StoreUnreachable and raises one Warning
// Event StoreUnreachable on the lock, not one per failed attempt.
func TestUnreachableStoreOnTheNode(t *testing.T) {
	t.Parallel() // no timing bound but generous deadlines: runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	conn, err := net.DialTimeout("tcp", unreachableStore, 5*time.Second)
	if err == nil {
		conn.Close()
		t.Fatalf("something listens on %s, which this test needs closed", unreachableStore)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dialling %s from the host: %v; want connection refused", unreachableStore, err)
	}
	ns := testenv.Namespace(t, c.client, "unreachable-")
	dl, dep, _ := batonnode.Workload{Namespace: ns, Name: "demo", Replicas: 1, Mode: batonv1.ModeBlocking,
		Policy: batonv1.TrafficReadinessGate, Lease: 5 * time.Second}.Objects()
	dl.Spec.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{unreachableStore}}
	for _, o := range []client.Object{dl, dep} {
		if err := c.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	want := "waiting for Cassandra at " + unreachableStore + ": "

	// The pod's condition, written by its sidecar.
	var pod corev1.Pod
	var cond corev1.PodCondition
	testenv.WaitFor(t, "the pod's condition to say what the sidecar waits for", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, ns)
		if len(pods) != 1 {
			return false
		}
		pod = pods[0]
		for _, pc := range pod.Status.Conditions {
			if pc.Type == batonv1.ConditionLockHeld {
				cond = pc
			}
		}
		return cond.Status == corev1.ConditionFalse && cond.Reason == sidecar.ReasonWaitingForStore &&
			strings.Contains(cond.Message, want) && strings.Contains(cond.Message, "connection refused")
	})
	t.Logf("pod condition %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)

	// The sidecar's socket, as the app sees it.
	socket := filepath.Join(c.node.EmptyDir(string(pod.UID), inject.SocketVolume), filepath.Base(sidecarclient.SocketPath))
	_, err = sidecarClient(t, socket).Locks(ctx)
	var answer *sidecarclient.Error
	if !errors.As(err, &answer) || answer.Status != http.StatusServiceUnavailable || answer.Code != sidecarclient.CodeStarting ||
		!strings.Contains(answer.Message, want) {
		t.Errorf("GET /v1/locks on the sidecar's socket: %v; want 503 %q saying %q", err, sidecarclient.CodeStarting, want)
	} else {
		t.Logf("the sidecar's socket answers: %v", err)
	}

	// The startup probe, as the kubelet reports it.
	var probe string
	testenv.WaitFor(t, "the kubelet's Event of the failed startup probe", time.Minute, func() bool {
		for _, e := range events(t, ctx, c, ns) {
			if e.InvolvedObject.Name == pod.Name && e.Reason == "Unhealthy" &&
				strings.Contains(e.Message, "Startup probe failed") && strings.Contains(e.Message, want) {
				probe = e.Message
				return true
			}
		}
		return false
	})
	t.Logf("kubelet: %s", probe)

	// The operator: StoreReachable, and one Warning Event however often it tried.
	var reachable metav1.Condition
	testenv.WaitFor(t, "StoreReachable False StoreUnreachable after 3 failed attempts", time.Minute, func() bool {
		var got batonv1.DistributedLock
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo"}, &got); err != nil {
			return false
		}
		cnd := meta.FindStatusCondition(got.Status.Conditions, batonv1.ConditionStoreReachable)
		if cnd == nil || cnd.Status != metav1.ConditionFalse || cnd.Reason != controllers.ReasonStoreUnreachable {
			return false
		}
		reachable = *cnd
		m := failedAttempts.FindStringSubmatch(cnd.Message)
		if len(m) != 2 {
			return false
		}
		n, err := strconv.Atoi(m[1])
		return err == nil && n >= 3
	})
	t.Logf("StoreReachable %s: %s", reachable.Reason, reachable.Message)
	if !strings.Contains(reachable.Message, unreachableStore) {
		t.Errorf("StoreReachable does not name the contact point %s: %s", unreachableStore, reachable.Message)
	}
	var warnings []corev1.Event
	for _, e := range events(t, ctx, c, ns) {
		if e.InvolvedObject.Kind == "DistributedLock" && e.Reason == controllers.ReasonStoreUnreachable {
			warnings = append(warnings, e)
		}
	}
	if len(warnings) != 1 || warnings[0].Type != corev1.EventTypeWarning || (warnings[0].Series != nil && warnings[0].Series.Count > 1) {
		t.Fatalf("Events StoreUnreachable on the lock: %+v; want one Warning", warnings)
	}
	t.Logf("one Warning Event %s: %s", warnings[0].Reason, warnings[0].Message)
}

// events returns the Events of namespace ns, of the core API (the operator's, written through
// events.k8s.io, among them).
func events(t *testing.T, ctx context.Context, c cluster, ns string) []corev1.Event {
	t.Helper()
	list, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("events of %s: %v", ns, err)
	}
	return list.Items
}
