package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// The real node's own checks ride on the suite's node instead of starting one of their own (a
// node start is about a minute of make test): TestNodeKeepsItsStateUnderItsDirectories looks at
// the machine while the node runs, and TestMain, after the node stops, checks that nothing is
// left and that the kernel setting the kubelet changed is back (checkNodeLeftNothing).

// panicSysctl is the kernel setting that shows whether Stop puts back what the kubelet changed:
// the kubelet sets kernel.panic to 10 (seconds before a reboot after a panic), which matters only
// if the kernel panics. TestMain sets a stand-in value (panicBefore) before the node starts, so
// that the check cannot pass because the machine already had the kubelet's value.
const (
	panicSysctl = "/proc/sys/kernel/panic"
	panicBefore = "7"
)

// TestNodeKeepsItsStateUnderItsDirectories: with a pod running, Leftovers sees the node (the
// bridge, BaseDir, the pod's network namespace mounted under containerd's state directory, not in
// /var/run/netns), containerd has no NRI socket, the kubelet's kernel setting is in force and the
// node's helper finds the pod's emptyDir.
func TestNodeKeepsItsStateUnderItsDirectories(t *testing.T) {
	t.Parallel()
	n := node.Get(t)
	c := clients(t, n)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	if got := readSysctl(t); got != "10" {
		t.Errorf("kernel.panic = %s with the node running, want the kubelet's 10 (does it still set it?)", got)
	}
	const ns = "node-state"
	if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeNamespace(t, c, ns) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "scratch", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: imagebuild.PauseTag, ImagePullPolicy: corev1.PullNever,
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Volumes:                       []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the pod to run", 2*time.Minute, func() bool {
		p, err := c.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false
		}
		pod = p
		return true
	})
	if fi, err := os.Stat(n.EmptyDir(string(pod.UID), "scratch")); err != nil || !fi.IsDir() {
		t.Errorf("EmptyDir of the running pod: %v", err)
	}
	running := localnode.Leftovers(ctx)
	podNetns := "mount " + filepath.Join(localnode.BaseDir, "containerd", "state", "io.containerd.grpc.v1.cri", "netns") + "/"
	want := []string{"link baton0", "file " + localnode.BaseDir}
	if n.Sandboxed {
		// The pod's network namespace is mounted in the node's mount namespace, which the host
		// does not see.
		want = append(want, "link batonv1", "cgroup ")
		if hasPrefix(running, podNetns) {
			t.Errorf("a sandboxed node's pod network namespace mount shows on the host: %v", running)
		}
	} else {
		want = append(want, podNetns)
	}
	for _, w := range want {
		if !hasPrefix(running, w) {
			t.Errorf("with a pod running, Leftovers has no %q: %v", w, running)
		}
	}
	if hasPrefix(running, "netns ") {
		t.Errorf("a pod's network namespace is in /var/run/netns, not under containerd's state: %v", running)
	}
	if _, err := os.Lstat("/run/nri/nri.sock"); err == nil {
		t.Errorf("the node's containerd made /run/nri/nri.sock: NRI is on")
	}
}

// setPanicStandIn writes panicBefore into panicSysctl and returns the function that puts the
// machine's own value back.
func setPanicStandIn() (restore func(), err error) {
	orig, err := os.ReadFile(panicSysctl)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(panicSysctl, []byte(panicBefore), 0o644); err != nil {
		return nil, err
	}
	return func() { _ = os.WriteFile(panicSysctl, orig, 0o644) }, nil
}

// checkNodeLeftNothing stops the node, if a test started it, and returns what it left on the
// machine: Leftovers, looked at while no other node can start, and a kernel.panic other than the
// stand-in from before the node.
func checkNodeLeftNothing() []string {
	if !node.Started() {
		return nil
	}
	start := time.Now()
	node.Stop()
	fmt.Fprintf(os.Stderr, "e2e: node stopped and cleaned up in %s\n", time.Since(start).Round(100*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	unlock, err := localnode.LockMachine(ctx) // no other node starts while we look
	if err != nil {
		return []string{fmt.Sprintf("lock the machine to look for leftovers: %v", err)}
	}
	defer unlock()
	problems := localnode.Leftovers(ctx)
	if b, err := os.ReadFile(panicSysctl); err != nil || strings.TrimSpace(string(b)) != panicBefore {
		problems = append(problems, fmt.Sprintf("kernel.panic = %q (%v) after Stop, want %s from before the node",
			strings.TrimSpace(string(b)), err, panicBefore))
	}
	return problems
}

func readSysctl(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(panicSysctl)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func hasPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
