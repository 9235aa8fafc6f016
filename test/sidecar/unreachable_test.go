package main_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecar"
)

// TestUnreachableStoreIsExplained: a real sidecar process whose Cassandra contact point does not
// answer (a loopback port nothing listens on), in a pod with baton's readiness gate on a real
// kube-apiserver. The startup probe's own command (baton wait --timeout 0, as the webhook
// injects it) says what the sidecar waits for and the last failure, instead of "no sidecar socket
// ... is the pod annotated with baton.dev/lock?"; the pod's baton.dev/lock-held condition says the
// same (False, WaitingForStore); SIGTERM still ends the sidecar cleanly.
func TestUnreachableStoreIsExplained(t *testing.T) {
	client := kube.Client(t)
	kubeconfig := testenv.WriteKubeconfig(t, kube.Config(t))
	ctx := context.Background()
	ns := fmt.Sprintf("unreachable-%d", time.Now().UnixNano())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-0", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: batonv1.ConditionLockHeld}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	batonBin := filepath.Join(t.TempDir(), "baton")
	if out, err := exec.Command("go", "build", "-o", batonBin, "github.com/baton-dev/baton/cmd/baton").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/baton: %v\n%s", err, out)
	}

	socket := filepath.Join(t.TempDir(), "baton.sock")
	out := &testenv.SyncBuffer{}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS=orders", "BATON_CASSANDRA_HOSTS="+closed, "BATON_TRAFFIC_POLICY=ReadinessGate",
		"BATON_KUBECONFIG="+kubeconfig, "POD_NAMESPACE="+ns, "POD_NAME=worker-0", "POD_UID="+string(pod.UID),
		"BATON_SOCKET="+socket, "BATON_METRICS_ADDR=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("sidecar output:\n%s", out.String())
		}
	})

	want := "waiting for Cassandra at " + closed + ": "
	var probe string
	testenv.WaitFor(t, "the startup probe's command to say what the sidecar waits for", 30*time.Second, func() bool {
		b, err := exec.Command(batonBin, "wait", "--socket", socket, "--timeout", "0").CombinedOutput()
		probe = string(b)
		return err != nil && strings.Contains(probe, want) && strings.Contains(probe, "connection refused")
	})
	t.Logf("startup probe (baton wait --timeout 0) says: %s", strings.TrimSpace(probe))

	var cond corev1.PodCondition
	testenv.WaitFor(t, "the pod's condition to say what the sidecar waits for", 30*time.Second, func() bool {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "worker-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == batonv1.ConditionLockHeld {
				cond = c
			}
		}
		return cond.Status == corev1.ConditionFalse && cond.Reason == sidecar.ReasonWaitingForStore &&
			strings.Contains(cond.Message, want) && strings.Contains(cond.Message, "connection refused")
	})
	t.Logf("pod condition %s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("after SIGTERM while waiting for Cassandra: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sidecar did not stop within 10 s of SIGTERM while waiting for Cassandra")
	}
}
