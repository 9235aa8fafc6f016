package sidecaraccess

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/inject"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "sidecaraccess"

// CacheByObject is the manager cache setup the Reconciler is built for: Pods only with the label
// baton.dev/injected=true, Roles and RoleBindings only named baton-sidecar. Pass it (merged with
// other controllers' entries) as cache.Options.ByObject; the Reconciler also works with a full
// cache, at the cost of caching every pod and RBAC object of the cluster.
func CacheByObject() map[client.Object]cache.ByObject {
	own := fields.OneTermEqualSelector("metadata.name", Name)
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:         {Label: labels.SelectorFromSet(labels.Set{inject.LabelInjected: "true"})},
		&rbacv1.Role{}:        {Field: own},
		&rbacv1.RoleBinding{}: {Field: own},
	}
}

// Reconciler keeps the Role and RoleBinding baton-sidecar of each namespace in line with the
// namespace's DistributedLocks and injected pods (see the package doc). Requests name a namespace
// (the request's Name is always baton-sidecar); the Reconciler reads the namespace's state from
// Client, never from the event that woke it.
type Reconciler struct {
	// Client reads through the manager's cache (see CacheByObject) and writes to the API server.
	Client client.Client
	Log    logr.Logger
}

// Reading what the namespace holds, and managing the Role and RoleBinding:
// +kubebuilder:rbac:groups=baton.dev,resources=distributedlocks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;delete
//
// What the Role grants. RBAC refuses to let the operator create a Role granting more than it
// holds itself (escalation prevention):
// +kubebuilder:rbac:groups="",resources=pods;pods/status,verbs=patch

// Reconcile brings the Role and RoleBinding of req's namespace to the desired state: created or
// updated when the namespace has DistributedLocks or injected pods, deleted when it has neither.
// It writes only what differs.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	log := r.Log.WithValues("namespace", ns)

	var locks batonv1.DistributedLockList
	if err := r.Client.List(ctx, &locks, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing DistributedLocks in namespace %s: %w", ns, err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{inject.LabelInjected: "true"}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing injected pods in namespace %s: %w", ns, err)
	}
	access, needed := Desired(ns, locks.Items, pods.Items)
	if !needed {
		// The binding first: without it the Role grants nothing.
		if err := r.deleteOwn(ctx, log, "RoleBinding", &rbacv1.RoleBinding{}, ns); err != nil {
			return handleWriteError(log, err)
		}
		if err := r.deleteOwn(ctx, log, "Role", &rbacv1.Role{}, ns); err != nil {
			return handleWriteError(log, err)
		}
		return ctrl.Result{}, nil
	}
	// The Role first, so that a new RoleBinding never refers to a missing Role.
	if err := r.ensureRole(ctx, log, access.Role(ns)); err != nil {
		return handleWriteError(log, err)
	}
	if err := r.ensureRoleBinding(ctx, log, access.RoleBinding(ns)); err != nil {
		return handleWriteError(log, err)
	}
	return ctrl.Result{}, nil
}

// cacheLagRetry is when a reconcile that raced the cache is retried.
const cacheLagRetry = time.Second

// handleWriteError sorts out write errors that need no report:
//   - AlreadyExists and Conflict: the cache had not yet seen the Reconciler's own (or someone
//     else's) latest write; the event of that write, or the retry, reconciles again.
//   - a namespace being deleted: its pods and DistributedLocks are going away, and their deletion
//     triggers the cleanup.
func handleWriteError(log logr.Logger, err error) (ctrl.Result, error) {
	switch {
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
		log.V(1).Info("cache behind the API server; retrying", "err", err.Error())
		return ctrl.Result{RequeueAfter: cacheLagRetry}, nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		log.V(1).Info("namespace is terminating; not granting sidecar access", "err", err.Error())
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// ensureRole creates want or updates the Role of its name when its rules or labels differ.
func (r *Reconciler) ensureRole(ctx context.Context, log logr.Logger, want *rbacv1.Role) error {
	var have rbacv1.Role
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating Role %s/%s: %w", want.Namespace, want.Name, err)
		}
		log.Info("created sidecar Role", "role", want.Name, "rules", len(want.Rules))
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading Role %s/%s: %w", want.Namespace, want.Name, err)
	}
	lbls, relabel := withOwnLabels(have.Labels)
	if !relabel && equality.Semantic.DeepEqual(have.Rules, want.Rules) {
		return nil
	}
	if !managed(&have) {
		log.Info("taking over Role not created by the operator", "role", have.Name)
	}
	upd := have.DeepCopy()
	upd.Labels = lbls
	upd.Rules = want.Rules
	if err := r.Client.Update(ctx, upd); err != nil {
		return fmt.Errorf("updating Role %s/%s: %w", want.Namespace, want.Name, err)
	}
	log.Info("updated sidecar Role", "role", want.Name, "rules", len(want.Rules))
	return nil
}

// ensureRoleBinding creates want or updates the RoleBinding of its name when its subjects or
// labels differ; a binding to another role is replaced (roleRef cannot be changed).
func (r *Reconciler) ensureRoleBinding(ctx context.Context, log logr.Logger, want *rbacv1.RoleBinding) error {
	var have rbacv1.RoleBinding
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if err == nil && have.RoleRef != want.RoleRef {
		log.Info("replacing RoleBinding bound to another role", "roleBinding", have.Name, "roleRef", have.RoleRef.Kind+"/"+have.RoleRef.Name)
		if err := r.delete(ctx, "RoleBinding", &have); err != nil {
			return err
		}
		err = apierrors.NewNotFound(rbacv1.Resource("rolebindings"), have.Name)
	}
	if apierrors.IsNotFound(err) {
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating RoleBinding %s/%s: %w", want.Namespace, want.Name, err)
		}
		log.Info("created sidecar RoleBinding", "roleBinding", want.Name, "subjects", subjectNames(want.Subjects))
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading RoleBinding %s/%s: %w", want.Namespace, want.Name, err)
	}
	lbls, relabel := withOwnLabels(have.Labels)
	if !relabel && slices.Equal(have.Subjects, want.Subjects) {
		return nil
	}
	if !managed(&have) {
		log.Info("taking over RoleBinding not created by the operator", "roleBinding", have.Name)
	}
	upd := have.DeepCopy()
	upd.Labels = lbls
	upd.Subjects = want.Subjects
	if err := r.Client.Update(ctx, upd); err != nil {
		return fmt.Errorf("updating RoleBinding %s/%s: %w", want.Namespace, want.Name, err)
	}
	log.Info("updated sidecar RoleBinding", "roleBinding", want.Name, "subjects", subjectNames(want.Subjects))
	return nil
}

// deleteOwn deletes the kind (read into obj) named Name in ns, if it exists and carries the
// operator's labels; a Role or RoleBinding someone else made is left alone.
func (r *Reconciler) deleteOwn(ctx context.Context, log logr.Logger, kind string, obj client.Object, ns string) error {
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: Name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s %s/%s: %w", kind, ns, Name, err)
	}
	if !managed(obj) {
		return nil
	}
	if err := r.delete(ctx, kind, obj); err != nil {
		return err
	}
	log.Info("deleted sidecar "+kind+": namespace has no DistributedLock and no injected pod", "name", Name)
	return nil
}

// delete deletes obj (of kind) as it was read: a version changed since then is not deleted (the
// conflict requeues the request).
func (r *Reconciler) delete(ctx context.Context, kind string, obj client.Object) error {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	err := r.Client.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

func subjectNames(s []rbacv1.Subject) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i].Name
	}
	return out
}

// SetupWithManager registers the Reconciler with mgr. It is triggered by the creation and
// deletion of DistributedLocks and injected pods, by changes of a DistributedLock's spec, of a
// pod's injected label or of whether it finished, and by any change of a Role or RoleBinding named
// baton-sidecar (so drift is repaired). Every event maps to its namespace.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		return fmt.Errorf("%s: Reconciler.Client is nil", ControllerName)
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(namespaceRequest)
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		Watches(&batonv1.DistributedLock{}, toNamespace, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, toNamespace, builder.WithPredicates(podChanged())).
		Watches(&rbacv1.Role{}, toNamespace, builder.WithPredicates(ownName())).
		Watches(&rbacv1.RoleBinding{}, toNamespace, builder.WithPredicates(ownName())).
		Complete(r)
}

// namespaceRequest maps any namespaced object to the request of its namespace.
func namespaceRequest(_ context.Context, obj client.Object) []reconcile.Request {
	if obj.GetNamespace() == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: Name}}}
}

// podChanged passes pod creations and deletions, and updates that change what Desired looks at:
// the injected label or whether the pod finished. (The service account cannot change.) The
// sidecars' own condition and label updates are filtered out.
func podChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
		newPod, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return Injected(oldPod) != Injected(newPod) || finished(oldPod) != finished(newPod)
	}}
}

// ownName passes only objects named baton-sidecar (the cache of CacheByObject holds no others).
func ownName() predicate.Funcs {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetName() == Name })
}
