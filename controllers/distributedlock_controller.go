package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/storepool"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// Event reasons of the DistributedLock reconciler.
const (
	ReasonHolderChanged = "HolderChanged"
	// ReasonRevoked: a grant named by baton.dev/revoke was revoked.
	ReasonRevoked = "Revoked"
	// reasonRevokeBound: a bare lock ID in baton.dev/revoke was bound to the current grant's token.
	reasonRevokeBound = "RevokeBound"
	// ReasonRevokeGone: the grant named by baton.dev/revoke had already ended; nothing was revoked.
	ReasonRevokeGone = "RevokeTargetGone"
	// reasonRevokeFailed: an entry of baton.dev/revoke is invalid or names nothing to revoke.
	reasonRevokeFailed      = "RevokeFailed"
	ReasonRolloutWouldStall = "RolloutWouldStall"
	ReasonStoreUnreachable  = "StoreUnreachable"
	// reasonConnecting: the first attempt to connect to the lock store is still under way.
	reasonConnecting      = "Connecting"
	ReasonScopeNotAllowed = "ScopeNotAllowed"
	// ReasonClusterMismatch: the contact points reach another Cassandra cluster than the one the
	// lock lives on (status.cassandraClusterName); the operator neither reads nor revokes there.
	ReasonClusterMismatch = "ClusterMismatch"
	// ReasonConnectionNotAllowed: the operator's policy refuses the lock's Cassandra connection (a
	// contact point off its allow-list, a Secret without the opt-in label, no credentials); it
	// makes no connection (see PoolSource).
	ReasonConnectionNotAllowed = "ConnectionNotAllowed"
	// ReasonAuthenticationFailed: Cassandra refused the lock's own login (or client certificate),
	// which its sidecars use too: they refuse to start with the same error.
	ReasonAuthenticationFailed = "AuthenticationFailed"
	// ReasonServerNotTrusted: a Cassandra server's certificate does not verify against the lock's
	// CA and server name, which its sidecars use too.
	ReasonServerNotTrusted = "ServerNotTrusted"
)

// DefaultStatusInterval is how often the reconciler re-reads the lock store when nothing in
// Kubernetes changed: Cassandra has no watch.
const DefaultStatusInterval = 10 * time.Second

// DefaultMaxConcurrentReconciles is how many DistributedLocks are reconciled at once: one lock
// whose store is slow holds up one worker, not every other lock.
const DefaultMaxConcurrentReconciles = 8

// connectingPoll is how soon a reconcile that found its lock store still connecting runs again.
const connectingPoll = time.Second

// conflictRetry is how soon a reconcile whose status write met a newer object runs again.
const conflictRetry = 100 * time.Millisecond

// storeTimeout bounds the store reads and revocations of one reconcile.
const storeTimeout = 15 * time.Second

// StoreSource gives the lock store a DistributedLock's pods use.
type StoreSource interface {
	Store(ctx context.Context, dl *batonv1.DistributedLock) (lock.Store, error)
}

// errorRedactor is a StoreSource that can remove the secrets of dl's connection (user name,
// password) from an error of its store: Cassandra quotes the user in some errors (a permission
// refused to a role), and the reconciler writes store errors into status, Events and its log.
type errorRedactor interface {
	Redact(ctx context.Context, dl *batonv1.DistributedLock, err error) error
}

// DistributedLockReconciler keeps DistributedLock status in line with the lock store: holders,
// tokens, queue lengths and the Ready, StoreReachable and RolloutSafe conditions. It emits
// HolderChanged Events and carries out the baton.dev/revoke annotation (see revoke). At its first
// successful read it records the Cassandra cluster the lock lives on (status.cassandraClusterName)
// and from then on neither reads nor revokes on any other cluster. It logs through the logger
// controller-runtime puts in each reconcile's context.
type DistributedLockReconciler struct {
	Client   client.Client
	Stores   StoreSource
	Recorder events.EventRecorder
	// Config is the injection configuration; the reconciler uses its Global-scope allow-list.
	Config inject.Config
	// Interval between store reads of one DistributedLock (DefaultStatusInterval when zero).
	Interval time.Duration
	// Metrics, when set, exports what the reconciler saw (see NewMetrics).
	Metrics *Metrics
	// Now is the clock of revocation records (time.Now when nil).
	Now func() time.Time
	// APIReader reads pods from the API server itself, not from a cache: handoff NewestRevision
	// marks an old holder only on such a reading (Client when nil, for a client without a cache).
	APIReader client.Reader
	// MaxConcurrentReconciles is how many DistributedLocks are reconciled at once
	// (DefaultMaxConcurrentReconciles when zero). One DistributedLock is never reconciled twice at
	// once (the work queue's promise), and the reconciler keeps no state of its own between
	// reconciles: Metrics, Stores and Recorder are safe for concurrent use.
	MaxConcurrentReconciles int
}

// +kubebuilder:rbac:groups=baton.dev,resources=distributedlocks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=baton.dev,resources=distributedlocks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;replicasets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler. It is triggered by changes of the DistributedLock's
// spec or annotations, of pods naming it and of workloads whose template names it, and every
// Interval. Only an injected pod runs a sidecar and so can change the lock's state: a manager
// whose cache holds only injected pods (the operator's) serves it fully.
func (r *DistributedLockReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Stores == nil || r.Recorder == nil {
		return errors.New("controllers: DistributedLockReconciler needs a Client, Stores and a Recorder")
	}
	byAnnotation := func(_ context.Context, ns string, annotations map[string]string) []reconcile.Request {
		name := strings.TrimSpace(annotations[batonv1.AnnotationLock])
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("distributedlock").
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.MaxConcurrentReconciles, DefaultMaxConcurrentReconciles)}).
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
	log := logf.FromContext(ctx) // names the DistributedLock and the reconcileID
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
	// kubectl's LOCKS column; written only with a status that changes anyway or when it changes.
	st.LockIDsText = strings.Join(dl.Spec.LockIDs, ",")

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
		// Nothing is read, let alone revoked, on a cluster the lock does not live on.
		err = r.checkCluster(dl, store)
	}
	if err == nil {
		snapshots, err = r.inspect(storeCtx, dl, store)
	}
	if err != nil {
		return r.storeFailed(ctx, orig, dl, r.redact(ctx, dl, err))
	}
	if st.CassandraClusterName == "" {
		// The first successful read: from now on this lock lives on this cluster.
		if name := clusterName(store); name != "" {
			st.CassandraClusterName = name
			log.Info("recorded the Cassandra cluster of the lock", "cluster", name)
		}
	}

	st.Locks = lockStatuses(dl, snapshots, prev)
	changes := holderChanges(prev, st.Locks)
	r.Metrics.observe(dl, st.Locks, changes)
	for _, c := range changes {
		from := c.OldHolder
		if from == "" {
			from = "nobody"
		}
		r.Recorder.Eventf(dl, nil, corev1.EventTypeNormal, ReasonHolderChanged, "Acquire",
			"lock %s: %s -> %s (token %d)", c.LockID, from, c.NewHolder, c.NewToken)
	}
	revocation := r.revoke(storeCtx, dl, store, snapshots)
	next := r.interval()
	if pending, err := r.handoff(ctx, dl, snapshots); err != nil {
		log.Info("marking superseded pods failed; retrying", "err", err.Error())
		next = min(next, handoffPoll)
	} else if pending {
		next = min(next, handoffPoll)
	}

	r.setCondition(dl, batonv1.ConditionStoreReachable, metav1.ConditionTrue, "Read",
		fmt.Sprintf("read %d lock(s) from the lock store", len(dl.Spec.LockIDs)))
	r.setCondition(dl, batonv1.ConditionReady, metav1.ConditionTrue, "StatusCurrent",
		"status.locks reflects the lock store as of the last reconcile")
	st.ObservedGeneration = dl.Generation
	if err := r.patchStatus(ctx, orig, dl); err != nil {
		return statusWritten(err, ctrl.Result{})
	}
	// Only now that the revocations are recorded: a reconcile woken by this change then reads a
	// copy that holds the records, and acts on the entries bound here.
	edited, err := r.bindRevocations(ctx, dl, revocation)
	switch {
	case err != nil:
		return ctrl.Result{}, err
	case revocation.failed != nil:
		return ctrl.Result{}, r.redact(ctx, dl, revocation.failed)
	case edited:
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// redact returns err without the secrets of dl's connection, if the StoreSource can tell them
// (errorRedactor); err as it is otherwise.
func (r *DistributedLockReconciler) redact(ctx context.Context, dl *batonv1.DistributedLock, err error) error {
	if rd, ok := r.Stores.(errorRedactor); ok && err != nil {
		return rd.Redact(ctx, dl, err)
	}
	return err
}

// storeFailed writes into dl's status why its lock store could not be read (err) and says when
// the reconciler looks again: shortly while the store is still connecting (storepool.ErrConnecting)
// or trying again, at the retry time of a connection that failed and is left alone until then
// (*storepool.RetryError, whose message says why and when), after the interval otherwise.
func (r *DistributedLockReconciler) storeFailed(ctx context.Context, orig, dl *batonv1.DistributedLock, err error) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	msg := err.Error()
	dl.Status.ObservedGeneration = dl.Generation
	if errors.Is(err, storepool.ErrConnecting) {
		log.V(1).Info("lock store still connecting", "err", msg)
		r.setCondition(dl, batonv1.ConditionStoreReachable, metav1.ConditionUnknown, reasonConnecting, msg)
		r.setCondition(dl, batonv1.ConditionReady, metav1.ConditionFalse, reasonConnecting, "connecting to the lock store; status.locks shows the last state seen")
		return statusWritten(r.patchStatus(ctx, orig, dl), ctrl.Result{RequeueAfter: min(r.interval(), connectingPoll)})
	}
	r.Metrics.unreachable(dl)
	reason, ready := ReasonStoreUnreachable, "the lock store could not be read; status.locks shows the last state seen"
	if errors.Is(err, cassandrastore.ErrClusterMismatch) {
		reason, ready = ReasonClusterMismatch, "the contact points reach another Cassandra cluster than the one this lock lives on; status.locks shows the last state seen on it"
		log.Info("lock store is another Cassandra cluster; not reading it", "err", msg)
	} else if errors.Is(err, errConnectionNotAllowed) {
		reason, ready = ReasonConnectionNotAllowed, "the operator refuses this lock's Cassandra connection; StoreReachable says why"
		log.Info("lock store connection not allowed; not connecting", "err", msg)
	} else if errors.Is(err, cassandrastore.ErrAuthentication) {
		reason, ready = ReasonAuthenticationFailed, "Cassandra refuses this lock's credentials, which its sidecars use too: they refuse to start; StoreReachable says why"
		log.Info("lock store refused the lock's login", "err", msg)
	} else if errors.Is(err, cassandrastore.ErrServerNotTrusted) {
		reason, ready = ReasonServerNotTrusted, "the Cassandra servers' certificates do not verify with this lock's CA and server name, which its sidecars use too: they refuse to start; StoreReachable says why"
		log.Info("lock store certificate not trusted", "err", msg)
	} else {
		log.Info("lock store unreachable", "err", msg)
	}
	// One Warning each time the lock enters this failure: from True, from Connecting (a lock whose
	// store never answered), or from another failure; none for the reconciles that find it still
	// failing the same way.
	was := meta.FindStatusCondition(orig.Status.Conditions, batonv1.ConditionStoreReachable)
	announce := was == nil || was.Status != metav1.ConditionFalse || was.Reason != reason
	r.setCondition(dl, batonv1.ConditionStoreReachable, metav1.ConditionFalse, reason, msg)
	r.setCondition(dl, batonv1.ConditionReady, metav1.ConditionFalse, reason, ready)
	if announce {
		r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, reason, "ReadLockStore", "%s", msg)
	}
	next := r.interval()
	if rerr := (*storepool.RetryError)(nil); errors.As(err, &rerr) {
		next = min(next, connectingPoll) // a retry under way
		if d := rerr.RetryAt.Sub(r.now()); rerr.Trying.IsZero() && d > 0 {
			next = d
		}
	}
	return statusWritten(r.patchStatus(ctx, orig, dl), ctrl.Result{RequeueAfter: next})
}

// clusterNamer is a lock store that knows which Cassandra cluster it reached
// (*cassandrastore.Store).
type clusterNamer interface{ ClusterName() string }

func clusterName(store lock.Store) string {
	if c, ok := store.(clusterNamer); ok {
		return c.ClusterName()
	}
	return ""
}

// checkCluster refuses a store on another Cassandra cluster than the one dl lives on
// (status.cassandraClusterName); stores that cannot tell their cluster are not checked.
func (r *DistributedLockReconciler) checkCluster(dl *batonv1.DistributedLock, store lock.Store) error {
	want, got := dl.Status.CassandraClusterName, clusterName(store)
	if want == "" || got == "" || want == got {
		return nil
	}
	return fmt.Errorf("%w: DistributedLock %s/%s lives on Cassandra cluster %q (status.cassandraClusterName), but its contact points %v reach cluster %q, "+
		"so the operator neither reads nor revokes there and new pods' sidecars refuse to start: point spec.cassandra.contactPoints "+
		"(or the operator's --cassandra-hosts) back at nodes of cluster %q; to move the lock to another cluster, create a new DistributedLock",
		cassandrastore.ErrClusterMismatch, dl.Namespace, dl.Name, want, r.Config.StoreConnection(dl).ContactPoints, got, want)
}

// inspect reads every lock of dl, keyed by the declared lock ID.
func (r *DistributedLockReconciler) inspect(ctx context.Context, dl *batonv1.DistributedLock, store lock.Store) (map[string]lock.Status, error) {
	out := make(map[string]lock.Status, len(dl.Spec.LockIDs))
	for _, id := range dl.Spec.LockIDs {
		s, err := lock.Inspect(ctx, store, sidecarcontract.StoreLockID(dl.Spec.Scope, dl.Namespace, id))
		if err != nil {
			return nil, err
		}
		out[id] = s
	}
	return out, nil
}

// rolloutSafety sets RolloutSafe from the Deployments and StatefulSets that use dl. When a
// workload's problem is new (not in the condition's message before), it raises a Warning Event
// on the lock and one on the workload itself, where `kubectl describe deployment` and tools that
// watch the workload's Events (Argo CD) show it. It does not repeat an Event while the problem
// stays, nor withdraw one when the problem is fixed: the condition says what holds now.
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
	stalls := RolloutStalls(dl, deps.Items, sets.Items)
	if len(stalls) == 0 {
		r.setCondition(dl, batonv1.ConditionRolloutSafe, metav1.ConditionTrue, "RolloutsProceed",
			"no Deployment or StatefulSet using this lock would stall its rollout under the traffic policy")
		return
	}
	problems := make([]string, len(stalls))
	for i, st := range stalls {
		problems[i] = st.Message
	}
	msg := strings.Join(problems, "; ")
	was := meta.FindStatusCondition(dl.Status.Conditions, batonv1.ConditionRolloutSafe)
	known := func(p string) bool {
		return was != nil && was.Status == metav1.ConditionFalse && strings.Contains(was.Message, p)
	}
	if was == nil || was.Status != metav1.ConditionFalse || was.Message != msg {
		r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRolloutWouldStall, "CheckRollout", "%s", msg)
	}
	for _, st := range stalls {
		if !known(st.Message) {
			r.Recorder.Eventf(st.Workload, dl, corev1.EventTypeWarning, ReasonRolloutWouldStall, "CheckRollout",
				"%s (DistributedLock %s, condition %s)", st.Message, dl.Name, batonv1.ConditionRolloutSafe)
		}
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
