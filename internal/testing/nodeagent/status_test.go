package nodeagent

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestKubeletStatusReadyFollowsGates(t *testing.T) {
	const gate = corev1.PodConditionType("baton.dev/lock-held")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "app"}},
			InitContainers: []corev1.Container{{Name: "baton"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: gate}},
		},
	}
	ready := func(st corev1.PodStatus) corev1.ConditionStatus {
		return conditionStatus(st.Conditions, corev1.PodReady)
	}

	st := kubeletStatus(pod, false)
	if st.Phase != corev1.PodRunning || st.PodIP == "" || len(st.ContainerStatuses) != 1 || len(st.InitContainerStatuses) != 1 {
		t.Fatalf("status %+v", st)
	}
	if ready(st) != corev1.ConditionFalse {
		t.Errorf("Ready %s without the gate's condition, want False", ready(st))
	}
	pod.Status = st
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: gate, Status: corev1.ConditionTrue})
	st = kubeletStatus(pod, false)
	if ready(st) != corev1.ConditionTrue {
		t.Errorf("Ready %s with the gate True, want True", ready(st))
	}
	if !slices.ContainsFunc(st.Conditions, func(c corev1.PodCondition) bool { return c.Type == gate && c.Status == corev1.ConditionTrue }) {
		t.Error("the gate's condition was not kept")
	}
	if !statusEqual(st, kubeletStatus(&corev1.Pod{ObjectMeta: pod.ObjectMeta, Spec: pod.Spec, Status: st}, false)) {
		t.Error("a second report of the same state differs: the agent would write forever")
	}
}

func TestKubeletStatusSidecarExited(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "app"}},
		InitContainers: []corev1.Container{{Name: "baton"}},
	}}
	st := kubeletStatus(pod, true)
	if conditionStatus(st.Conditions, corev1.PodReady) != corev1.ConditionFalse || conditionStatus(st.Conditions, corev1.ContainersReady) != corev1.ConditionFalse {
		t.Errorf("conditions %+v: a pod whose sidecar exited must not be Ready", st.Conditions)
	}
	if s := st.InitContainerStatuses[0]; s.Ready || s.State.Terminated == nil {
		t.Errorf("sidecar status %+v, want terminated and not ready", s)
	}
	if !statusEqual(st, kubeletStatus(&corev1.Pod{Spec: pod.Spec, Status: st}, true)) {
		t.Error("a second report of the same state differs")
	}
}

func TestResolveEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"}}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	got, err := resolveEnv(pod, []corev1.EnvVar{
		{Name: "A", Value: "1"}, {Name: "NS", ValueFrom: field("metadata.namespace")},
		{Name: "N", ValueFrom: field("metadata.name")}, {Name: "U", ValueFrom: field("metadata.uid")},
		{Name: "IP", ValueFrom: field("status.podIP")},
	})
	if err != nil || !slices.Equal(got, []string{"A=1", "NS=ns", "N=p", "U=u-1", "IP=" + podIP(pod)}) {
		t.Errorf("resolveEnv = %q, %v", got, err)
	}
	if _, err := resolveEnv(pod, []corev1.EnvVar{{Name: "X", ValueFrom: field("spec.nodeName")}}); err == nil {
		t.Error("an unsupported field was accepted")
	}
}

// TestPodIPs: each pod gets its own loopback address, the same every time.
func TestPodIPs(t *testing.T) {
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "0c1d-1"}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "0c1d-2"}}
	ipA, err := netip.ParseAddr(podIP(a))
	if err != nil || !ipA.IsLoopback() || podIP(a) != podIP(a.DeepCopy()) || podIP(a) == podIP(b) {
		t.Fatalf("pod IPs %s and %s: want two distinct, stable loopback addresses", podIP(a), podIP(b))
	}
	if st := kubeletStatus(a, false); st.PodIP != podIP(a) || st.PodIPs[0].IP != podIP(a) {
		t.Errorf("status reports pod IP %s, the env %s", st.PodIP, podIP(a))
	}
}
