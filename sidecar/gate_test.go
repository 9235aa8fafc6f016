package sidecar

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock/memstore"
)

var kube = testenv.NewKube()

// TestMain fails the run if goroutines of the holders and gates (hold loops, leases, gate loops,
// API connections) outlive the tests.
func TestMain(m *testing.M) {
	testenv.VerifyTestMain(m, kube.Stop)
}

// gatedPod creates a pod with baton's readiness gate and returns its options for a holder.
func gatedPod(t *testing.T, client kubernetes.Interface, ns, name string, policy batonv1.TrafficPolicy) Options {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: batonv1.ConditionLockHeld}},
		},
	}
	created, err := client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, name, batonv1.ModeBlocking, "orders")
	o.Pod = PodIdentity{Namespace: ns, Name: name, UID: string(created.UID)}
	o.TrafficPolicy = policy
	return o
}

func namespace(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	ns := fmt.Sprintf("gate-%d", time.Now().UnixNano())
	if _, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// runGated starts a holder on the in-memory lock store and its gate against the real API server.
func runGated(t *testing.T, client kubernetes.Interface, mem *memstore.Store, seed uint64, o Options) *Holder {
	t.Helper()
	h, err := NewHolder(o, mem.Client(seed, memstore.Faults{}), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { NewGate(client, o, h, logr.Discard()).Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; _ = h.Shutdown(context.Background()) })
	h.Start(ctx)
	return h
}

func condition(t *testing.T, client kubernetes.Interface, ns, name string) (corev1.PodCondition, bool) {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == batonv1.ConditionLockHeld {
			return c, true
		}
	}
	return corev1.PodCondition{}, false
}

func TestGateReadinessCondition(t *testing.T) {
	client := kube.Client(t)
	ns := namespace(t, client)
	mem := memstore.New()
	a := runGated(t, client, mem, 1, gatedPod(t, client, ns, "a", batonv1.TrafficReadinessGate))
	testenv.WaitFor(t, "pod a's condition True", 10*time.Second, func() bool {
		c, ok := condition(t, client, ns, "a")
		return ok && c.Status == corev1.ConditionTrue && c.Reason == "LockHeld" && strings.Contains(c.Message, "orders (token ")
	})
	runGated(t, client, mem, 2, gatedPod(t, client, ns, "b", batonv1.TrafficReadinessGate))
	testenv.WaitFor(t, "pod b's condition False with its queue position", 10*time.Second, func() bool {
		c, ok := condition(t, client, ns, "b")
		return ok && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "position 1 for lock orders")
	})
	if c, _ := condition(t, client, ns, "a"); c.Status != corev1.ConditionTrue {
		t.Fatalf("pod a lost its condition: %+v", c)
	}

	// The holder goes away: b's condition turns True, a's False.
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	took := testenv.WaitFor(t, "pod b's condition True after a released", 10*time.Second, func() bool {
		c, _ := condition(t, client, ns, "b")
		return c.Status == corev1.ConditionTrue
	})
	t.Logf("pod b's condition True %v after a released (handoff plus patch)", took.Round(time.Millisecond))
	testenv.WaitFor(t, "pod a's condition False", 10*time.Second, func() bool {
		c, _ := condition(t, client, ns, "a")
		return c.Status == corev1.ConditionFalse
	})
}

func TestGateRoleLabel(t *testing.T) {
	client := kube.Client(t)
	ns := namespace(t, client)
	mem := memstore.New()
	label := func(name string) string {
		pod, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pod.Labels[batonv1.LabelRole]
	}
	a := runGated(t, client, mem, 1, gatedPod(t, client, ns, "a", batonv1.TrafficLabel))
	testenv.WaitFor(t, "pod a labelled holder", 10*time.Second, func() bool { return label("a") == batonv1.RoleHolder })
	runGated(t, client, mem, 2, gatedPod(t, client, ns, "b", batonv1.TrafficLabel))
	testenv.WaitFor(t, "pod b labelled standby", 10*time.Second, func() bool { return label("b") == batonv1.RoleStandby })
	if _, ok := condition(t, client, ns, "a"); ok {
		t.Fatal("label mode must not write the readiness condition")
	}
	_ = a.Shutdown(context.Background())
	testenv.WaitFor(t, "pod b labelled holder", 10*time.Second, func() bool { return label("b") == batonv1.RoleHolder })
	testenv.WaitFor(t, "pod a labelled standby", 10*time.Second, func() bool { return label("a") == batonv1.RoleStandby })
}

// TestUnreachableAPIServerDoesNotDelayFencing: with the API server unreachable, the gate cannot
// report anything, yet the holder still reports the loss of its lock before the lease ends.
func TestUnreachableAPIServerDoesNotDelayFencing(t *testing.T) {
	client, err := kubeClient(writeDeadKubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New()
	o := testOptions(t, "a", batonv1.ModeBlocking, "orders")
	store := mem.Client(1, memstore.Faults{})
	h, err := NewHolder(o, store, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gateDone := make(chan struct{})
	go func() { NewGate(client, o, h, logr.Discard()).Run(ctx); close(gateDone) }()
	defer func() { cancel(); <-gateDone; _ = h.Shutdown(context.Background()) }()
	events, stop := h.Subscribe()
	defer stop()
	h.Start(ctx)
	if e := <-events; e.Type != "acquired" {
		t.Fatalf("%+v", e)
	}
	cutAt := time.Now()
	store.Partition(time.Minute)
	select {
	case e := <-events:
		if e.Type != "lost" {
			t.Fatalf("%+v", e)
		}
		if took := time.Since(cutAt); took > o.Lease {
			t.Fatalf("loss reported %v after the store was cut off, later than one lease", took)
		}
		if h.Ready() {
			t.Fatal("still ready after the loss")
		}
	case <-time.After(2 * o.Lease):
		t.Fatal("no loss reported while the API server was unreachable")
	}
}

// writeDeadKubeconfig writes a kubeconfig pointing at a closed loopback port.
func writeDeadKubeconfig(t *testing.T) string {
	t.Helper()
	path := t.TempDir() + "/kubeconfig"
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:1\n" +
		"contexts:\n- name: dead\n  context:\n    cluster: dead\n    user: dead\nusers:\n- name: dead\n  user:\n    token: x\ncurrent-context: dead\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
