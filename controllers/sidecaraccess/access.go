package sidecaraccess

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// Name is the name of the RoleBinding in each namespace, and the name the
// ValidatingAdmissionPolicyBinding baton-sidecar-own-pod looks up as its parameter.
const Name = "baton-sidecar"

// The ClusterRoles the RoleBinding refers to. They are installed with the operator (the chart, or
// config/sidecar); the operator binds them with the RBAC verb bind on these names only, so it
// needs neither the rights they grant nor any write access to Roles (see clusterRoles).
const (
	// clusterRoleStatus allows patch on pods/status: the lock-held and stepped-aside conditions.
	clusterRoleStatus = "baton-sidecar"
	// clusterRoleLabel allows patch on pods/status and on pods, for the Label traffic policy.
	clusterRoleLabel = "baton-sidecar-label"
)

// clusterRoles returns the two ClusterRoles the RoleBindings refer to, as config/sidecar ships
// them.
func clusterRoles() []*rbacv1.ClusterRole {
	status := rbacv1.PolicyRule{APIGroups: []string{corev1.GroupName}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}}
	pods := rbacv1.PolicyRule{APIGroups: []string{corev1.GroupName}, Resources: []string{"pods"}, Verbs: []string{"patch"}}
	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelName: appName, "app.kubernetes.io/component": "sidecar-access"}},
			Rules:      rules,
		}
	}
	return []*rbacv1.ClusterRole{role(clusterRoleStatus, status), role(clusterRoleLabel, status, pods)}
}

// Labels on the RoleBinding. Only a binding carrying labelManagedBy: managedBy is deleted by the
// Reconciler.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "baton-operator"
	labelName      = "app.kubernetes.io/name"
	appName        = "baton"
)

// defaultServiceAccount is the service account of a pod whose spec names none.
const defaultServiceAccount = "default"

// access is what the sidecars of one namespace are granted.
type access struct {
	// ClusterRole bound: clusterRoleStatus, or clusterRoleLabel when a DistributedLock of the
	// namespace has the Label traffic policy or leaves it unset (see desired).
	ClusterRole string
	// Subjects of the RoleBinding: the service accounts of the injected pods, sorted by name,
	// without repeats. It may be empty (locks but no pods yet).
	Subjects []rbacv1.Subject
}

// desired returns the access of the sidecars in namespace ns given its DistributedLocks and pods,
// and false when the namespace needs none (it has neither a DistributedLock nor an injected pod).
// Objects of other namespaces, pods the webhook did not inject (see inject.Injected) and pods that
// finished (phase Succeeded or Failed: their sidecar no longer runs) are ignored.
func desired(ns string, locks []batonv1.DistributedLock, pods []corev1.Pod) (access, bool) {
	var (
		anyLock, label bool
		accounts       []string
	)
	for i := range locks {
		if locks[i].Namespace != ns {
			continue
		}
		anyLock = true
		// Unset, the policy is Label for the pods of Deployments, StatefulSets and DaemonSets
		// (inject.Defaults): granted before the first such pod starts, whatever kind it is.
		if p := locks[i].Spec.TrafficPolicy; p == batonv1.TrafficLabel || p == "" {
			label = true
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Namespace != ns || !inject.Injected(p) || finished(p) {
			continue
		}
		sa := p.Spec.ServiceAccountName
		if sa == "" {
			sa = defaultServiceAccount
		}
		accounts = append(accounts, sa)
	}
	if !anyLock && len(accounts) == 0 {
		return access{}, false
	}

	a := access{ClusterRole: clusterRoleStatus}
	if label {
		a.ClusterRole = clusterRoleLabel
	}
	slices.Sort(accounts)
	for _, sa := range slices.Compact(accounts) {
		a.Subjects = append(a.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns})
	}
	return a, true
}

// finished reports whether pod has terminated for good.
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// RoleBinding returns the RoleBinding of a's ClusterRole to a's subjects in namespace ns.
func (a access) RoleBinding(ns string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: objectMeta(ns),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: a.ClusterRole},
		Subjects:   slices.Clone(a.Subjects),
	}
}

func objectMeta(ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: Name, Namespace: ns, Labels: ownLabels()}
}

func ownLabels() map[string]string {
	return map[string]string{labelManagedBy: managedBy, labelName: appName}
}

// managed reports whether obj carries the labels the Reconciler puts on what it creates.
func managed(obj metav1.Object) bool {
	l := obj.GetLabels()
	return l[labelManagedBy] == managedBy
}

// withOwnLabels returns a copy of labels with the Reconciler's labels set.
func withOwnLabels(labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+2)
	maps.Copy(out, labels)
	maps.Copy(out, ownLabels())
	return out
}
