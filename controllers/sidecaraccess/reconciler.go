package sidecaraccess

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// controllerName names the controller in logs and metrics.
const controllerName = "sidecaraccess"

// Reconciler keeps the RoleBinding baton-sidecar of each namespace in line with the
// namespace's DistributedLocks and injected pods (see the package doc). Requests name a namespace
// (the request's Name is always baton-sidecar); the Reconciler reads the namespace's state from
// Client, never from the event that woke it. It logs through the logger controller-runtime puts
// in each reconcile's context.
type Reconciler struct {
	// Client reads and writes the namespace's objects. Through a manager's cache it needs that
	// cache to hold the pods labelled baton.dev/injected=true and the RoleBindings named
	// baton-sidecar; the operator's cache holds just those (operator.CacheOptions).
	Client client.Client
}

// Reading what the namespace holds, and managing the RoleBinding: by name wherever RBAC can
// limit a verb to names (list and watch too, because the cache selects the name with a field
// selector); create cannot be, and the ValidatingAdmissionPolicy baton-operator-rolebindings
// (config/policy) allows the operator no other name and no other role.
// +kubebuilder:rbac:groups=baton.dev,resources=distributedlocks,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=rolebindings,verbs=get;list;watch;update;delete,resourceNames=baton-sidecar
//
// RBAC lets the operator bind a role only if it holds every right of the role (escalation
// prevention) or may bind that very role: bind on the sidecars' two ClusterRoles, and no more.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=baton-sidecar;baton-sidecar-label

// Reconcile brings the RoleBinding of req's namespace to the desired state: created or updated
// when the namespace has DistributedLocks or injected pods, deleted when it has neither. It writes
// only what differs. A RoleBinding to another role (the Role baton-sidecar of earlier versions, or
// the other sidecar ClusterRole after a change of traffic policy) is replaced: for that moment the
// namespace's sidecars have no grant, and their writes fail and are retried.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	log := logf.FromContext(ctx)

	var locks batonv1.DistributedLockList
	if err := r.Client.List(ctx, &locks, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing DistributedLocks in namespace %s: %w", ns, err)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{batonv1.LabelInjected: "true"}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing injected pods in namespace %s: %w", ns, err)
	}
	want, needed := desired(ns, locks.Items, pods.Items)
	if !needed {
		if err := r.deleteOwn(ctx, log, "RoleBinding", &rbacv1.RoleBinding{}, ns); err != nil {
			return handleWriteError(log, err)
		}
		return ctrl.Result{}, nil
	}
	if err := r.ensureRoleBinding(ctx, log, want.RoleBinding(ns)); err != nil {
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

// The RoleBinding is written with controllerutil.CreateOrUpdate rather than server-side
// apply: it reads through the cache and writes only when the object differs (a reconcile runs on
// every pod event of the namespace, and an apply would be a request each time), its update is
// conditioned on the resourceVersion read, so a concurrent change is never overwritten unseen,
// and the object is the operator's alone: there are no fields of other managers to share,
// which is what apply is for.

// errRoleRefChanged: the RoleBinding is bound to another role, and roleRef cannot be changed.
var errRoleRefChanged = errors.New("sidecaraccess: RoleBinding bound to another role")

// ensureRoleBinding creates want or updates the RoleBinding of its name when its subjects or
// labels differ; a binding to another role is replaced (roleRef cannot be changed).
func (r *Reconciler) ensureRoleBinding(ctx context.Context, log logr.Logger, want *rbacv1.RoleBinding) error {
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: want.Namespace, Name: want.Name}}
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, rb, func() error {
		if rb.ResourceVersion != "" && rb.RoleRef != want.RoleRef {
			return errRoleRefChanged
		}
		takeOver(log, "RoleBinding", rb)
		rb.Labels = withOwnLabels(rb.Labels)
		rb.RoleRef = want.RoleRef
		rb.Subjects = want.Subjects
		return nil
	})
	if errors.Is(err, errRoleRefChanged) {
		log.Info("replacing RoleBinding bound to another role", "roleRef", rb.RoleRef.Kind+"/"+rb.RoleRef.Name)
		if err := r.delete(ctx, "RoleBinding", rb); err != nil {
			return err
		}
		// Created here, not by CreateOrUpdate: the cache still holds the binding just deleted.
		if err := r.Client.Create(ctx, want); err != nil {
			return fmt.Errorf("creating RoleBinding %s/%s: %w", want.Namespace, want.Name, err)
		}
		op, err = controllerutil.OperationResultCreated, nil
	}
	if err != nil {
		return fmt.Errorf("writing RoleBinding %s/%s: %w", want.Namespace, want.Name, err)
	}
	if op != controllerutil.OperationResultNone {
		log.Info(string(op)+" sidecar RoleBinding", "subjects", subjectNames(want.Subjects))
	}
	return nil
}

// takeOver logs that obj (of kind), which exists and is about to be written, was not made by the
// operator.
func takeOver(log logr.Logger, kind string, obj client.Object) {
	if obj.GetResourceVersion() != "" && !managed(obj) {
		log.Info("taking over " + kind + " not created by the operator")
	}
}

// deleteOwn deletes the kind (read into obj) named Name in ns, if it exists and carries the
// operator's labels; a RoleBinding someone else made is left alone.
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
	log.Info("deleted sidecar " + kind + ": namespace has no DistributedLock and no injected pod")
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
// pod's injected label or of whether it finished, and by any change of the RoleBinding named
// baton-sidecar (so drift is repaired). Every event maps to its namespace.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		return fmt.Errorf("%s: Reconciler.Client is nil", controllerName)
	}
	toNamespace := handler.EnqueueRequestsFromMapFunc(namespaceRequest)
	return ctrl.NewControllerManagedBy(mgr).
		Named(controllerName).
		Watches(&batonv1.DistributedLock{}, toNamespace, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, toNamespace, builder.WithPredicates(podChanged())).
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

// podChanged passes pod creations and deletions, and updates that change what desired looks at:
// the injected label or whether the pod finished. (The service account cannot change.) The
// sidecars' own condition and label updates are filtered out.
func podChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
		newPod, ok2 := e.ObjectNew.(*corev1.Pod)
		if !ok1 || !ok2 {
			return true
		}
		return inject.Injected(oldPod) != inject.Injected(newPod) || finished(oldPod) != finished(newPod)
	}}
}

// ownName passes only objects named baton-sidecar (the operator's cache holds no others).
func ownName() predicate.Funcs {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool { return obj.GetName() == Name })
}
