package localnode_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// panicSysctl is the kernel setting the test uses to see that Stop puts back what the kubelet
// changed: the kubelet sets kernel.panic to 10 (seconds before a reboot after a panic), which
// matters only if the kernel panics.
const panicSysctl = "/proc/sys/kernel/panic"

// TestStopLeavesNothing starts the node with a pod on it and stops it: while the pod runs,
// Leftovers sees the node (the bridge, BaseDir, the pod's network namespace mounted under
// containerd's state directory, not in /var/run/netns) and containerd has no NRI socket; the
// node's helpers reach the pod's emptyDir and kill its container; after Stop, with no node
// running, Leftovers is empty and the kernel setting the kubelet changed is back to what it was.
func TestStopLeavesNothing(t *testing.T) {
	testenv.SkipShort(t, "a real node (kubelet, containerd, runc, kube-proxy)")
	if err := localnode.CheckHost(); err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// Stand in for the machine's own value, one the kubelet does not set; put the real one back.
	orig, err := os.ReadFile(panicSysctl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(panicSysctl, orig, 0o644) })
	const before = "7"
	if err := os.WriteFile(panicSysctl, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	node, _, err := batonnode.Start(ctx, batonnode.StartOptions{Progress: os.Stderr, InstallTimeout: 45 * time.Minute})
	if err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skipf("no real node here (under CI=true this fails): %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			node.Stop()
		}
	}()
	t.Logf("node Ready in %s", time.Since(start).Round(100*time.Millisecond))
	if got := sysctl(t); got != "10" {
		t.Errorf("kernel.panic = %s with the node running, want the kubelet's 10 (does it still set it?)", got)
	}

	kube, err := kubernetes.NewForConfig(node.Config)
	if err != nil {
		t.Fatal(err)
	}
	pod := runPod(ctx, t, kube)
	if fi, err := os.Stat(node.EmptyDir(string(pod.UID), "scratch")); err != nil || !fi.IsDir() {
		t.Errorf("EmptyDir of the running pod: %v", err)
	}
	running := localnode.Leftovers(ctx)
	for _, want := range []string{"link baton0", "file " + localnode.BaseDir, "mount " + filepath.Join(localnode.BaseDir, "containerd", "state", "io.containerd.grpc.v1.cri", "netns") + "/"} {
		if !hasPrefix(running, want) {
			t.Errorf("with a pod running, Leftovers has no %q: %v", want, running)
		}
	}
	if hasPrefix(running, "netns ") {
		t.Errorf("a pod's network namespace is in /var/run/netns, not under containerd's state: %v", running)
	}
	if _, err := os.Lstat("/run/nri/nri.sock"); err == nil {
		t.Errorf("the node's containerd made /run/nri/nri.sock: NRI is on")
	}

	if err := node.KillContainer(ctx, pod.Status.ContainerStatuses[0].ContainerID); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the killed container to be restarted", time.Minute, func() bool {
		p, err := kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0
	})

	start = time.Now()
	node.Stop()
	stopped = true
	t.Logf("node stopped and cleaned up in %s", time.Since(start).Round(100*time.Millisecond))
	unlock, err := localnode.LockMachine(ctx) // no other node starts while we look
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if left := localnode.Leftovers(ctx); len(left) > 0 {
		t.Errorf("after Stop, the node left %d things on the machine:\n%s", len(left), strings.Join(left, "\n"))
	}
	if got := sysctl(t); got != before {
		t.Errorf("kernel.panic = %s after Stop, want %s from before the node", got, before)
	}
}

// runPod runs a pod of the pause image with an emptyDir volume and returns it once its container
// runs.
func runPod(ctx context.Context, t *testing.T, kube kubernetes.Interface) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "leftovers", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "pause", Image: imagebuild.PauseTag, ImagePullPolicy: corev1.PullNever,
				VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}}},
			Volumes:                       []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if _, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	testenv.WaitFor(t, "the pod to run", 2*time.Minute, func() bool {
		p, err := kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			return false
		}
		got = p
		return true
	})
	return got
}

func sysctl(t *testing.T) string {
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
