package inject

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// Marked returns why pod, as it is being created, already carries one of the markers only Inject
// may add (the annotation or the label baton.dev/injected), or "" when it carries neither. The
// webhook denies such a pod: the operator trusts the markers (it grants the sidecar's permissions
// to the service accounts of marked pods), so they must come from the webhook's mutation, never
// from the pod's author. A copy of an injected pod (kubectl get -o yaml | kubectl create) is
// denied too: create it from its workload, or without the markers and the sidecar.
func Marked(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	if _, ok := pod.Annotations[batonv1.AnnotationInjected]; ok {
		return "pod carries the annotation " + batonv1.AnnotationInjected + ", which only baton's webhook sets when it injects the sidecar: remove it (and the sidecar, if the pod is a copy of an injected pod) and let the webhook inject"
	}
	if _, ok := pod.Labels[batonv1.LabelInjected]; ok {
		return "pod carries the label " + batonv1.LabelInjected + ", which only baton's webhook sets when it injects the sidecar: remove it (and the sidecar, if the pod is a copy of an injected pod) and let the webhook inject"
	}
	return ""
}

// Injected reports whether pod was injected by the webhook, as far as the pod can tell: it
// carries the label baton.dev/injected=true and the annotation, and has the sidecar container
// (containers can only be added when a pod is created). It relies on the webhook: the webhook
// denies a pod created with the markers and any later change of them, so the markers of a pod
// admitted while the webhook was installed are the webhook's own. It does not guarantee that:
// pods created while the webhook configuration was absent (or edited to leave pods out) were not
// checked, and the sidecar container's image and settings are not compared with what the webhook
// would inject today.
func Injected(pod *corev1.Pod) bool {
	return pod != nil && pod.Labels[batonv1.LabelInjected] == "true" && pod.Annotations[batonv1.AnnotationInjected] != "" &&
		hasContainer(pod, ContainerName)
}

// Required says whether pod should get the baton sidecar and, when it should not, why. It looks
// only at the pod: whether the referenced DistributedLock exists is the caller's question. It does
// not look for baton's markers (Marked) or an existing sidecar container: the webhook denies the
// first, and Inject refuses the second (ErrConflict), so that no pod skips the webhook's checks by
// looking injected.
func Required(pod *corev1.Pod) (bool, string) {
	if pod == nil {
		return false, "no pod"
	}
	if strings.TrimSpace(pod.Annotations[batonv1.AnnotationLock]) == "" {
		return false, "pod has no " + batonv1.AnnotationLock + " annotation"
	}
	if v, ok := pod.Annotations[batonv1.AnnotationInject]; ok && OptedOut(v) {
		return false, "pod opted out with annotation " + batonv1.AnnotationInject + ": " + v
	}
	if pod.Spec.HostNetwork {
		return false, "pod uses the host network: its sidecar's loopback metrics port would collide with other pods on the node; run it without hostNetwork or remove the " + batonv1.AnnotationLock + " annotation"
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
