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
// needs neither the rights they grant nor any write access to Roles (see ClusterRoles).
const (
	// ClusterRoleStatus allows patch on pods/status: the lock-held and stepped-aside conditions.
	ClusterRoleStatus = "baton-sidecar"
	// ClusterRoleLabel allows patch on pods/status and on pods, for the Label traffic policy.
	ClusterRoleLabel = "baton-sidecar-label"
)

// ClusterRoles returns the two ClusterRoles the RoleBindings refer to, as config/sidecar ships
// them.
func ClusterRoles() []*rbacv1.ClusterRole {
	status := rbacv1.PolicyRule{APIGroups: []string{corev1.GroupName}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}}
	pods := rbacv1.PolicyRule{APIGroups: []string{corev1.GroupName}, Resources: []string{"pods"}, Verbs: []string{"patch"}}
	role := func(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelName: AppName, "app.kubernetes.io/component": "sidecar-access"}},
			Rules:      rules,
		}
	}
	return []*rbacv1.ClusterRole{role(ClusterRoleStatus, status), role(ClusterRoleLabel, status, pods)}
}

// Labels on the RoleBinding. Only a binding carrying LabelManagedBy: ManagedBy is deleted by the
// Reconciler.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "baton-operator"
	LabelName      = "app.kubernetes.io/name"
	AppName        = "baton"
)

// defaultServiceAccount is the service account of a pod whose spec names none.
const defaultServiceAccount = "default"

// Access is what the sidecars of one namespace are granted.
type Access struct {
	// ClusterRole bound: ClusterRoleStatus, or ClusterRoleLabel when a DistributedLock of the
	// namespace has the Label traffic policy.
	ClusterRole string
	// Subjects of the RoleBinding: the service accounts of the injected pods, sorted by name,
	// without repeats. It may be empty (locks but no pods yet).
	Subjects []rbacv1.Subject
}

// Desired returns the access of the sidecars in namespace ns given its DistributedLocks and pods,
// and false when the namespace needs none (it has neither a DistributedLock nor an injected pod).
// Objects of other namespaces, pods the webhook did not inject (see Injected) and pods that
// finished (phase Succeeded or Failed: their sidecar no longer runs) are ignored.
func Desired(ns string, locks []batonv1.DistributedLock, pods []corev1.Pod) (Access, bool) {
	var (
		anyLock, label bool
		accounts       []string
	)
	for i := range locks {
		if locks[i].Namespace != ns {
			continue
		}
		anyLock = true
		if locks[i].Spec.TrafficPolicy == batonv1.TrafficLabel {
			label = true
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Namespace != ns || !Injected(p) || finished(p) {
			continue
		}
		sa := p.Spec.ServiceAccountName
		if sa == "" {
			sa = defaultServiceAccount
		}
		accounts = append(accounts, sa)
	}
	if !anyLock && len(accounts) == 0 {
		return Access{}, false
	}

	a := Access{ClusterRole: ClusterRoleStatus}
	if label {
		a.ClusterRole = ClusterRoleLabel
	}
	slices.Sort(accounts)
	for _, sa := range slices.Compact(accounts) {
		a.Subjects = append(a.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns})
	}
	return a, true
}

// Injected reports whether the webhook injected pod (inject.Injected): the label and annotation
// baton.dev/injected and the sidecar container. The label alone is not enough: a pod's author, or
// anyone who may update it, could set it.
func Injected(pod *corev1.Pod) bool { return inject.Injected(pod) }

// finished reports whether pod has terminated for good.
func finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// RoleBinding returns the RoleBinding of a's ClusterRole to a's subjects in namespace ns.
func (a Access) RoleBinding(ns string) *rbacv1.RoleBinding {
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
	return map[string]string{LabelManagedBy: ManagedBy, LabelName: AppName}
}

// managed reports whether obj carries the labels the Reconciler puts on what it creates.
func managed(obj metav1.Object) bool {
	l := obj.GetLabels()
	return l[LabelManagedBy] == ManagedBy
}

// withOwnLabels returns a copy of labels with the Reconciler's labels set.
func withOwnLabels(labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels)+2)
	maps.Copy(out, labels)
	maps.Copy(out, ownLabels())
	return out
}
