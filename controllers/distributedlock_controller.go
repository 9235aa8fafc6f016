package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers/inject"
	"github.com/baton-dev/baton/lock"
)

// Event reasons of the DistributedLock reconciler.
const (
	ReasonHolderChanged     = "HolderChanged"
	ReasonRevoked           = "Revoked"
	ReasonRevokeFailed      = "RevokeFailed"
	ReasonRolloutWouldStall = "RolloutWouldStall"
	ReasonStoreUnreachable  = "StoreUnreachable"
	ReasonScopeNotAllowed   = "ScopeNotAllowed"
)

// DefaultStatusInterval is how often the reconciler re-reads the lock store when nothing in
// Kubernetes changed: Cassandra has no watch.
const DefaultStatusInterval = 10 * time.Second

// conflictRetry is how soon a reconcile whose status write met a newer object runs again.
const conflictRetry = 100 * time.Millisecond

// storeTimeout bounds the store reads and revocations of one reconcile.
const storeTimeout = 15 * time.Second

// StoreSource gives the lock store a DistributedLock's pods use.
type StoreSource interface {
	Store(ctx context.Context, dl *batonv1.DistributedLock) (lock.Store, error)
}

// DistributedLockReconciler keeps DistributedLock status in line with the lock store: holders,
// tokens, queue lengths and the Ready, StoreReachable and RolloutSafe conditions. It emits
// HolderChanged Events and carries out the baton.dev/revoke annotation.
type DistributedLockReconciler struct {
	Client   client.Client
	Stores   StoreSource
	Recorder events.EventRecorder
	// Config is the injection configuration; the reconciler uses its Global-scope allow-list.
	Config inject.Config
	// Interval between store reads of one DistributedLock (DefaultStatusInterval when zero).
	Interval time.Duration
	Log      logr.Logger
	// Metrics, when set, exports what the reconciler saw (see NewMetrics).
	Metrics *Metrics
	// Now is the clock of revocation records (time.Now when nil).
	Now func() time.Time
}

// +kubebuilder:rbac:groups=baton.dev,resources=distributedlocks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=baton.dev,resources=distributedlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. It is triggered by changes of the DistributedLock's
// spec or annotations, of injected pods naming it and of workloads whose template names it, and
// every Interval.
func (r *DistributedLockReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Stores == nil || r.Recorder == nil {
		return errors.New("controllers: DistributedLockReconciler needs a Client, Stores and a Recorder")
	}
	byAnnotation := func(_ context.Context, ns string, annotations map[string]string) []reconcile.Request {
		name := strings.TrimSpace(annotations[inject.AnnotationLock])
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("distributedlock").
		For(&batonv1.DistributedLock{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return byAnnotation(ctx, o.GetNamespace(), o.GetAnnotations())
		})).
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return byAnnotation(ctx, o.GetNamespace(), o.(*appsv1.Deployment).Spec.Template.Annotations)
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			return byAnnotation(ctx, o.GetNamespace(), o.(*appsv1.StatefulSet).Spec.Template.Annotations)
		}), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

func (r *DistributedLockReconciler) interval() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return DefaultStatusInterval
}

func (r *DistributedLockReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile refreshes one DistributedLock's status.
func (r *DistributedLockReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := r.Log.WithValues("distributedlock", req.NamespacedName)
	dl := &batonv1.DistributedLock{}
	if err := r.Client.Get(ctx, req.NamespacedName, dl); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := dl.DeepCopy()
	st := &dl.Status
	prev := slices.Clone(st.Locks)

	r.rolloutSafety(ctx, dl)

	if dl.Spec.Scope == batonv1.ScopeGlobal && !r.Config.GlobalAllowed(dl.Namespace) {
		msg := fmt.Sprintf("scope Global is not allowed in namespace %s: the operator allows it only in namespaces on its allow-list (--global-namespaces); pods using this lock are not admitted", dl.Namespace)
		r.setCondition(dl, batonv1.ConditionReady, metav1.ConditionFalse, ReasonScopeNotAllowed, msg)
		meta.RemoveStatusCondition(&st.Conditions, batonv1.ConditionStoreReachable)
		if meta.FindStatusCondition(orig.Status.Conditions, batonv1.ConditionReady) == nil ||
			meta.IsStatusConditionTrue(orig.Status.Conditions, batonv1.ConditionReady) {
			r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonScopeNotAllowed, "Validate", "%s", msg)
		}
		return statusWritten(r.patchStatus(ctx, orig, dl), ctrl.Result{})
	}

	storeCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	store, err := r.Stores.Store(storeCtx, dl)
	var snapshots map[string]lock.Status
	if err == nil {
		snapshots, err = r.inspect(storeCtx, dl, store)
	}
	if err != nil {
		log.Info("lock store unreachable", "err", err.Error())
		r.Metrics.unreachable(dl)
		msg := err.Error()
		r.setCondition(dl, batonv1.ConditionStoreReachable, metav1.ConditionFalse, ReasonStoreUnreachable, msg)
		r.setCondition(dl, batonv1.ConditionReady, metav1.ConditionFalse, ReasonStoreUnreachable,
			"the lock store could not be read; status.locks shows the last state seen")
		if meta.IsStatusConditionTrue(orig.Status.Conditions, batonv1.ConditionStoreReachable) {
			r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonStoreUnreachable, "ReadLockStore", "%s", msg)
		}
		st.ObservedGeneration = dl.Generation
		return statusWritten(r.patchStatus(ctx, orig, dl), ctrl.Result{RequeueAfter: r.interval()})
	}

	st.Locks = LockStatuses(dl, snapshots, prev)
	changes := HolderChanges(prev, st.Locks)
	r.Metrics.observe(dl, st.Locks, changes)
	for _, c := range changes {
		from := c.OldHolder
		if from == "" {
			from = "nobody"
		}
		r.Recorder.Eventf(dl, nil, corev1.EventTypeNormal, ReasonHolderChanged, "Acquire",
			"lock %s: %s -> %s (token %d)", c.LockID, from, c.NewHolder, c.NewToken)
	}
	revoked, revokeErr := r.revoke(storeCtx, dl, store, snapshots)

	r.setCondition(dl, batonv1.ConditionStoreReachable, metav1.ConditionTrue, "Read",
		fmt.Sprintf("read %d lock(s) from the lock store", len(dl.Spec.LockIDs)))
	r.setCondition(dl, batonv1.ConditionReady, metav1.ConditionTrue, "StatusCurrent",
		"status.locks reflects the lock store as of the last reconcile")
	st.ObservedGeneration = dl.Generation
	if err := r.patchStatus(ctx, orig, dl); err != nil {
		return statusWritten(err, ctrl.Result{})
	}
	if revokeErr != nil {
		return ctrl.Result{}, revokeErr
	}
	// Only now that the revocation is recorded: a reconcile woken by this change then reads a
	// copy that holds the record.
	if err := r.removeRevokeAnnotation(ctx, dl, revoked); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: r.interval()}, nil
}

// inspect reads every lock of dl, keyed by the declared lock ID.
func (r *DistributedLockReconciler) inspect(ctx context.Context, dl *batonv1.DistributedLock, store lock.Store) (map[string]lock.Status, error) {
	out := make(map[string]lock.Status, len(dl.Spec.LockIDs))
	for _, id := range dl.Spec.LockIDs {
		s, err := lock.Inspect(ctx, store, batonv1.StoreLockID(dl.Spec.Scope, dl.Namespace, id))
		if err != nil {
			return nil, err
		}
		out[id] = s
	}
	return out, nil
}

// revoke carries out the baton.dev/revoke annotation: it revokes the grant of each named lock it
// saw in snapshots, by that grant's token, and records it in dl's status. It returns the
// annotation's value once every ID was dealt with, for removeRevokeAnnotation; a store error
// keeps the annotation for the retry.
func (r *DistributedLockReconciler) revoke(ctx context.Context, dl *batonv1.DistributedLock, store lock.Store, snapshots map[string]lock.Status) (string, error) {
	value, ok := dl.Annotations[batonv1.AnnotationRevoke]
	if !ok {
		return "", nil
	}
	var failed error
	for _, id := range strings.Split(value, ",") {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		snap, declared := snapshots[id]
		if !declared {
			r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRevokeFailed, "Revoke",
				"%s names lock %q, which is not in spec.lockIds %v; nothing revoked", batonv1.AnnotationRevoke, id, dl.Spec.LockIDs)
			continue
		}
		if !snap.Record.Held() {
			r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRevokeFailed, "Revoke",
				"lock %s is not held (token %d); nothing revoked", id, snap.Record.Token)
			continue
		}
		ns, name := batonv1.PodOfOwner(snap.Record.Owner)
		holder := name
		if ns != "" {
			holder = ns + "/" + name
		}
		token := snap.Record.Token
		err := lock.Revoke(ctx, store, batonv1.StoreLockID(dl.Spec.Scope, dl.Namespace, id), token)
		switch {
		case errors.Is(err, lock.ErrNotHolder):
			r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRevokeFailed, "Revoke",
				"lock %s changed hands before it could be revoked (%v); nothing revoked: annotate again to revoke the new holder", id, err)
			continue
		case err != nil:
			failed = errors.Join(failed, fmt.Errorf("revoking lock %s token %d: %w", id, token, err))
			continue
		}
		for i := range dl.Status.Locks {
			if dl.Status.Locks[i].LockID == id {
				dl.Status.Locks[i].LastRevocation = &batonv1.Revocation{Token: token, Holder: holder, Time: metav1.NewTime(r.now())}
			}
		}
		r.Metrics.revoked(dl, id)
		r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRevoked, "Revoke",
			"lock %s: revoked %s's grant (token %d); it stops claiming the lock at its next renewal, and the next waiter is granted one lease later", id, holder, token)
		r.Log.Info("revoked", "distributedlock", client.ObjectKeyFromObject(dl), "lock", id, "holder", holder, "token", token)
	}
	if failed != nil {
		return "", failed
	}
	return value, nil
}

// removeRevokeAnnotation removes the baton.dev/revoke annotation if it still says value (the
// request carried out); a changed annotation is left for the next reconcile.
func (r *DistributedLockReconciler) removeRevokeAnnotation(ctx context.Context, dl *batonv1.DistributedLock, value string) error {
	if value == "" {
		return nil
	}
	path := "/metadata/annotations/" + jsonPointerEscape(batonv1.AnnotationRevoke)
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": path, "value": value},
		{"op": "remove", "path": path},
	})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, dl.DeepCopy(), client.RawPatch(types.JSONPatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing annotation %s: %w", batonv1.AnnotationRevoke, err)
	}
	return nil
}

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// rolloutSafety sets RolloutSafe from the Deployments and StatefulSets that use dl, with a
// Warning Event when it turns False.
func (r *DistributedLockReconciler) rolloutSafety(ctx context.Context, dl *batonv1.DistributedLock) {
	var deps appsv1.DeploymentList
	var sets appsv1.StatefulSetList
	err := errors.Join(
		r.Client.List(ctx, &deps, client.InNamespace(dl.Namespace)),
		r.Client.List(ctx, &sets, client.InNamespace(dl.Namespace)))
	if err != nil {
		r.setCondition(dl, batonv1.ConditionRolloutSafe, metav1.ConditionUnknown, "ListFailed", "listing workloads: "+err.Error())
		return
	}
	problems := RolloutProblems(dl, deps.Items, sets.Items)
	if len(problems) == 0 {
		r.setCondition(dl, batonv1.ConditionRolloutSafe, metav1.ConditionTrue, "RolloutsProceed",
			"no Deployment or StatefulSet using this lock would stall its rollout under the traffic policy")
		return
	}
	msg := strings.Join(problems, "; ")
	was := meta.FindStatusCondition(dl.Status.Conditions, batonv1.ConditionRolloutSafe)
	if was == nil || was.Status != metav1.ConditionFalse || was.Message != msg {
		r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRolloutWouldStall, "CheckRollout", "%s", msg)
	}
	r.setCondition(dl, batonv1.ConditionRolloutSafe, metav1.ConditionFalse, ReasonRolloutWouldStall, msg)
}

func (r *DistributedLockReconciler) setCondition(dl *batonv1.DistributedLock, typ string, status metav1.ConditionStatus, reason, msg string) {
	const maxMessage = 32768 // the API's limit on condition messages
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	meta.SetStatusCondition(&dl.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: dl.Generation,
	})
}

// statusWritten is the result of a reconcile that wrote status with err: next when it succeeded, a
// prompt retry when our cached copy was stale (a conflict), err otherwise.
func statusWritten(err error, next ctrl.Result) (ctrl.Result, error) {
	switch {
	case err == nil:
		return next, nil
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	default:
		return ctrl.Result{}, err
	}
}

// patchStatus writes dl's status when it differs from orig's. The status carries state forward
// (transitions, the last revocation), so the patch is conditioned on orig's resourceVersion: a
// write based on a stale cached copy fails with a conflict instead of dropping that state.
func (r *DistributedLockReconciler) patchStatus(ctx context.Context, orig, dl *batonv1.DistributedLock) error {
	if equality.Semantic.DeepEqual(orig.Status, dl.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, dl, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("writing status of DistributedLock %s/%s: %w", dl.Namespace, dl.Name, err)
	}
	return nil
}
