package inject

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotations on a pod that steer injection.
const (
	// AnnotationLock names the DistributedLock, in the pod's namespace, whose locks the pod holds.
	// A pod without it is never injected.
	AnnotationLock = "baton.dev/lock"
	// AnnotationInject set to "false" (or "no", "off", "n", "0") opts a pod out of injection even
	// though it carries AnnotationLock.
	AnnotationInject = "baton.dev/inject"
	// AnnotationInjected is set by Inject to the sidecar image; a pod carrying it is not injected
	// again.
	AnnotationInjected = "baton.dev/injected"
	// LabelInjected ("true") marks injected pods, so that the operator can watch only those and
	// grant their service accounts the sidecar's permissions.
	LabelInjected = "baton.dev/injected"
)

// Required says whether pod should get the baton sidecar and, when it should not, why. It looks
// only at the pod: whether the referenced DistributedLock exists is the caller's question.
func Required(pod *corev1.Pod) (bool, string) {
	if pod == nil {
		return false, "no pod"
	}
	if strings.TrimSpace(pod.Annotations[AnnotationLock]) == "" {
		return false, "pod has no " + AnnotationLock + " annotation"
	}
	if v, ok := pod.Annotations[AnnotationInject]; ok && OptedOut(v) {
		return false, "pod opted out with annotation " + AnnotationInject + ": " + v
	}
	if _, ok := pod.Annotations[AnnotationInjected]; ok {
		return false, "pod is already injected (annotation " + AnnotationInjected + ")"
	}
	if hasContainer(pod, ContainerName) {
		return false, "pod is already injected (it has a container named " + ContainerName + ")"
	}
	if pod.Spec.HostNetwork {
		return false, "pod uses the host network: its sidecar's loopback metrics port would collide with other pods on the node; run it without hostNetwork or remove the " + AnnotationLock + " annotation"
	}
	return true, ""
}

// OptedOut reports whether an AnnotationInject value says no ("false", "no", "n", "off" or "0").
func OptedOut(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "false", "no", "n", "off", "0":
		return true
	}
	return false
}

// hasContainer reports whether pod has a container or init container called name.
func hasContainer(pod *corev1.Pod, name string) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range list {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}
