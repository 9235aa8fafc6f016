package main_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

var kube = testenv.NewKube()

func podCondition(t *testing.T, client kubernetes.Interface, ns, name string) corev1.ConditionStatus {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == batonv1.ConditionLockHeld {
			return c.Status
		}
	}
	return ""
}

// TestSidecarsDriveReadinessGate: real sidecar processes on a real Cassandra flip the readiness
// condition of their own pods on a real kube-apiserver.
func TestSidecarsDriveReadinessGate(t *testing.T) {
	cfg := kube.Config(t)
	client := kube.Client(t)
	kubeconfig := testenv.WriteKubeconfig(t, cfg)
	ns := fmt.Sprintf("e2e-gate-%d", time.Now().UnixNano())
	if _, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	procs := map[string]*sidecarProc{}
	for _, name := range []string{"a", "b"} {
		pod, err := client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				Containers:     []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: batonv1.ConditionLockHeld}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		procs[name] = startSidecar(t, ns, name, "BATON_TRAFFIC_POLICY=ReadinessGate",
			"BATON_KUBECONFIG="+kubeconfig, "POD_UID="+string(pod.UID))
		if name == "a" {
			testenv.WaitFor(t, "pod a's condition True", 15*time.Second, func() bool {
				return podCondition(t, client, ns, "a") == corev1.ConditionTrue
			})
		}
	}
	testenv.WaitFor(t, "pod b's condition False", 15*time.Second, func() bool {
		return podCondition(t, client, ns, "b") == corev1.ConditionFalse
	})

	term := time.Now()
	procs["a"].cmd.Process.Signal(syscall.SIGTERM)
	testenv.WaitFor(t, "pod b's condition True after a's SIGTERM", 15*time.Second, func() bool {
		return podCondition(t, client, ns, "b") == corev1.ConditionTrue
	})
	t.Logf("pod b became the holder %v after pod a's sidecar got SIGTERM", time.Since(term).Round(time.Millisecond))
	if got := podCondition(t, client, ns, "a"); got != corev1.ConditionFalse {
		t.Fatalf("pod a's condition is %q after its sidecar shut down, want False", got)
	}
}
