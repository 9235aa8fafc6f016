package nodeagent

import (
	"hash/fnv"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/inject"
)

// podIP is the address the agent gives a pod: one of 127.64.0.0/10, from its UID. Every sidecar
// process runs on this host, but each binds its own loopback address, as pods bind their own IPs
// (the hand-off hint port is the same in every pod).
func podIP(pod *corev1.Pod) string {
	h := fnv.New32a()
	h.Write([]byte(pod.UID))
	v := h.Sum32()
	return netip.AddrFrom4([4]byte{127, byte(64 + v>>16&63), byte(v >> 8), byte(v)}).String()
}

// kubeletConditions are the pod conditions a kubelet owns.
var kubeletConditions = []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady}

// kubeletStatus is pod's status as a kubelet running every container would report it; when
// sidecarExited, the baton container has exited (and is not restarted), so the pod is not Ready.
func kubeletStatus(pod *corev1.Pod, sidecarExited bool) corev1.PodStatus {
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	ip := podIP(pod)
	st.PodIP, st.HostIP = ip, "127.0.0.1"
	st.PodIPs = []corev1.PodIP{{IP: ip}}
	st.HostIPs = []corev1.HostIP{{IP: "127.0.0.1"}}
	if st.StartTime == nil {
		st.StartTime = ptrTime(pod.CreationTimestamp)
	}
	containersReady := corev1.ConditionTrue
	running := func(cs []corev1.Container, old []corev1.ContainerStatus) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, 0, len(cs))
		for _, c := range cs {
			s := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptrBool(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: pod.CreationTimestamp}}}
			for _, o := range old {
				if o.Name == c.Name && o.State.Running != nil {
					s.State = o.State
				}
			}
			if c.Name == inject.ContainerName && sidecarExited {
				s.Ready, s.Started = false, ptrBool(false)
				s.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: metav1.Now()}}
				for _, o := range old {
					if o.Name == c.Name && o.State.Terminated != nil {
						s.State = o.State
					}
				}
				containersReady = corev1.ConditionFalse
			}
			out = append(out, s)
		}
		return out
	}
	st.ContainerStatuses = running(pod.Spec.Containers, pod.Status.ContainerStatuses)
	st.InitContainerStatuses = running(pod.Spec.InitContainers, pod.Status.InitContainerStatuses)

	ready := containersReady
	for _, g := range pod.Spec.ReadinessGates {
		if conditionStatus(pod.Status.Conditions, g.ConditionType) != corev1.ConditionTrue {
			ready = corev1.ConditionFalse
		}
	}
	want := map[corev1.PodConditionType]corev1.ConditionStatus{
		corev1.PodScheduled: corev1.ConditionTrue, corev1.PodInitialized: corev1.ConditionTrue,
		corev1.ContainersReady: containersReady, corev1.PodReady: ready,
	}
	for _, t := range kubeletConditions {
		setCondition(&st.Conditions, t, want[t])
	}
	return st
}

func setCondition(conds *[]corev1.PodCondition, t corev1.PodConditionType, status corev1.ConditionStatus) {
	for i := range *conds {
		if (*conds)[i].Type == t {
			if (*conds)[i].Status != status {
				(*conds)[i].Status = status
				(*conds)[i].LastTransitionTime = metav1.Now()
			}
			return
		}
	}
	*conds = append(*conds, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.Now()})
}

func conditionStatus(conds []corev1.PodCondition, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range conds {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// statusEqual compares statuses ignoring transition times.
func statusEqual(a, b corev1.PodStatus) bool {
	strip := func(s corev1.PodStatus) corev1.PodStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }
func ptrBool(b bool) *bool               { return &b }
