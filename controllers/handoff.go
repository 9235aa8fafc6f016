package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
)

// reasonSuperseded is the Event reason when the operator marks pods of older revisions
// superseded (spec.handoff NewestRevision).
const reasonSuperseded = "Superseded"

// handoffPoll is how often the reconciler re-reads the lock store while a rollout under handoff
// NewestRevision waits for a pod of the newest revision to queue, or for old pods to step aside:
// the store has no watch, and no Kubernetes event says when a sidecar queued.
const handoffPoll = time.Second

// revisionAnnotation is the Deployment controller's revision number on each ReplicaSet.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// handoff is what handoff NewestRevision asks of the pods of one DistributedLock: the value of
// the annotation baton.dev/superseded each should carry, by pod name. Pods in neither map should
// not carry it.
type handoff struct {
	// Marks are for the old pods that do not hold a lock: marked as soon as a pod of the newest
	// revision holds or waits, their sidecars leave the queue and step aside (the pod condition
	// baton.dev/stepped-aside).
	Marks map[string]string
	// HolderMarks are for the old holders, once no old pod of their workload waits and every old
	// pod of it that does not hold has stepped aside (steppedAside). An old holder that carries a
	// mark keeps it.
	HolderMarks map[string]string
	// Pending is true while some workload of the lock has pods of an older revision that are not
	// marked because no pod of its newest revision holds or waits for the lock yet, or an old
	// holder that is not marked because an old pod still waits or has not stepped aside.
	Pending bool
}

// podRevision places a pod in its workload's history.
type podRevision struct {
	workload string // "Deployment/<name>" or "StatefulSet/<name>"
	revision string // as the workload names it: a number (Deployment) or a ControllerRevision name
	newest   bool
}

// rsInfo places a ReplicaSet in its Deployment's history.
type rsInfo struct {
	deployment string
	revision   int64
}

// contenders are the pods holding or waiting for a DistributedLock's locks, from the store, by
// "namespace/name".
type contenders struct {
	Holders, Waiters map[string]bool
}

// supersededPods works out handoff NewestRevision for dl: a pod of a Deployment or StatefulSet
// using dl is superseded when it is not of the workload's newest revision (the ReplicaSet with the
// highest deployment.kubernetes.io/revision; the StatefulSet's status.updateRevision) while a pod
// of the newest revision holds or waits for one of dl's locks. Old pods that do not hold are
// marked first, pods being deleted included (their sidecars run until their apps stop); an old
// holder only once no old pod of its workload waits and each of them has stepped aside for its
// mark (steppedAside), so that its release goes to a pod of the newest revision and no old pod
// can take it, whatever its app asks. Old holders being deleted are not marked: they release as
// they stop. Pods of other owners are never marked. With another handoff policy no pod is marked.
//
// It decides on the pods as given: the caller gives a copy read from the API server itself before
// it marks an old holder.
func supersededPods(dl *batonv1.DistributedLock, pods []corev1.Pod, replicaSets []appsv1.ReplicaSet,
	statefulSets []appsv1.StatefulSet, c contenders) handoff {
	out := handoff{Marks: map[string]string{}, HolderMarks: map[string]string{}}
	if dl.Spec.Handoff != batonv1.HandoffNewestRevision {
		return out
	}
	rsByName := make(map[string]rsInfo)
	newestOf := make(map[string]int64) // by Deployment name
	for i := range replicaSets {
		rs := &replicaSets[i]
		owner := metav1.GetControllerOf(rs)
		if rs.Namespace != dl.Namespace || owner == nil || owner.Kind != "Deployment" {
			continue
		}
		rev, err := strconv.ParseInt(rs.Annotations[revisionAnnotation], 10, 64)
		if err != nil {
			continue
		}
		rsByName[rs.Name] = rsInfo{owner.Name, rev}
		newestOf[owner.Name] = max(newestOf[owner.Name], rev)
	}
	setByName := make(map[string]*appsv1.StatefulSet)
	for i := range statefulSets {
		if statefulSets[i].Namespace == dl.Namespace {
			setByName[statefulSets[i].Name] = &statefulSets[i]
		}
	}

	type oldPod struct {
		pod   *corev1.Pod
		rev   podRevision
		holds bool
	}
	var old []oldPod
	newestContends := make(map[string]bool) // by workload: a pod of its newest revision holds or waits
	for i := range pods {
		p := &pods[i]
		if !usesLock(p.Namespace, p.Annotations, dl) {
			continue
		}
		r, ok := revisionOf(p, rsByName, newestOf, setByName)
		if !ok {
			continue
		}
		key := p.Namespace + "/" + p.Name
		switch {
		case r.newest && p.DeletionTimestamp == nil && (c.Holders[key] || c.Waiters[key]):
			newestContends[r.workload] = true
		case !r.newest:
			old = append(old, oldPod{p, r, c.Holders[key]})
		}
	}
	// Old pods that do not hold: marked; whether each workload's have all stepped aside.
	notAside := make(map[string]bool) // by workload: an old pod that does not hold waits or has not stepped aside
	for _, o := range old {
		if !newestContends[o.rev.workload] {
			out.Pending = true
			continue
		}
		if o.holds {
			continue
		}
		mark := markOf(o.rev)
		out.Marks[o.pod.Name] = mark
		if c.Waiters[o.pod.Namespace+"/"+o.pod.Name] || !steppedAside(o.pod, mark) {
			notAside[o.rev.workload] = true
		}
	}
	// Old holders: marked once the others of their workload stepped aside.
	for _, o := range old {
		if !newestContends[o.rev.workload] || !o.holds || o.pod.DeletionTimestamp != nil {
			continue
		}
		if notAside[o.rev.workload] && o.pod.Annotations[batonv1.AnnotationSuperseded] == "" {
			out.Pending = true
			continue
		}
		out.HolderMarks[o.pod.Name] = markOf(o.rev)
	}
	return out
}

// revisionOf places p in the history of the Deployment or StatefulSet that owns it; false for a
// pod of another owner, or of a workload whose revisions are not known.
func revisionOf(p *corev1.Pod, rsByName map[string]rsInfo, newestOf map[string]int64, setByName map[string]*appsv1.StatefulSet) (podRevision, bool) {
	owner := metav1.GetControllerOf(p)
	if owner == nil {
		return podRevision{}, false
	}
	switch owner.Kind {
	case "ReplicaSet":
		rs, ok := rsByName[owner.Name]
		if !ok {
			return podRevision{}, false
		}
		return podRevision{workload: "Deployment/" + rs.deployment, revision: strconv.FormatInt(rs.revision, 10),
			newest: rs.revision == newestOf[rs.deployment]}, true
	case "StatefulSet":
		s, ok := setByName[owner.Name]
		if !ok || s.Status.UpdateRevision == "" {
			return podRevision{}, false
		}
		rev := p.Labels[appsv1.ControllerRevisionHashLabelKey]
		return podRevision{workload: "StatefulSet/" + s.Name, revision: rev, newest: rev == s.Status.UpdateRevision}, true
	}
	return podRevision{}, false
}

// markOf is the mark of an old pod: the same value for every old pod of a revision and every
// reconcile of a rollout, so that a mark is written once.
func markOf(r podRevision) string {
	return fmt.Sprintf("revision %s of %s superseded: a pod of the newest revision waits for the lock", r.revision, r.workload)
}

// steppedAside reports whether the old pod p can take no grant while it carries mark: p carries
// it and its sidecar says it stepped aside for it (pod condition baton.dev/stepped-aside True
// with mark as its message: it left the queue, refuses acquisitions and has none in flight, and
// it withdraws the condition before it takes grants again), or p is being deleted and its
// sidecar container has stopped (the kubelet starts no container of a pod being deleted).
//
// It trusts the pod: the app shares the sidecar's service account and could set the condition
// itself; that can cost a hand-off through an old pod, never the lock's safety.
func steppedAside(p *corev1.Pod, mark string) bool {
	if p.Annotations[batonv1.AnnotationSuperseded] == mark {
		for _, c := range p.Status.Conditions {
			if c.Type == batonv1.ConditionSteppedAside && c.Status == corev1.ConditionTrue && c.Message == mark {
				return true
			}
		}
	}
	if p.DeletionTimestamp == nil {
		return false
	}
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if s.Name == inject.ContainerName {
			return s.State.Terminated != nil
		}
	}
	return false
}

// contendersOf lists the pods holding or waiting for one of the locks in snapshots.
func contendersOf(snapshots map[string]lock.Status) contenders {
	c := contenders{Holders: map[string]bool{}, Waiters: map[string]bool{}}
	add := func(to map[string]bool, owner string) {
		ns, name := sidecarcontract.PodOfOwner(owner)
		if name != "" {
			to[ns+"/"+name] = true
		}
	}
	for _, s := range snapshots {
		if s.Record.Held() {
			add(c.Holders, s.Record.Owner)
		}
		for _, e := range s.Queue {
			add(c.Waiters, e.Owner)
		}
	}
	return c
}

// handoff marks and unmarks the pods of dl as supersededPods says, and reports whether a rollout
// waits for a pod of the newest revision to queue, or for old pods to step aside (the caller then
// reads the store again soon). Pods are marked even when dl's handoff is not NewestRevision (any
// more): then every mark is removed, so no sidecar stays away from its locks. An old holder is
// marked only on pods read from the API server itself (APIReader), not on the cache: a stale copy
// could show an old pod stepped aside whose sidecar has since read its mark gone, withdrawn and
// queued again.
func (r *DistributedLockReconciler) handoff(ctx context.Context, dl *batonv1.DistributedLock, snapshots map[string]lock.Status) (bool, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(dl.Namespace)); err != nil {
		return false, fmt.Errorf("listing pods: %w", err)
	}
	var (
		sets appsv1.StatefulSetList
		rss  appsv1.ReplicaSetList
	)
	if dl.Spec.Handoff == batonv1.HandoffNewestRevision {
		if err := errors.Join(
			r.Client.List(ctx, &sets, client.InNamespace(dl.Namespace)),
			r.Client.List(ctx, &rss, client.InNamespace(dl.Namespace))); err != nil {
			return false, fmt.Errorf("listing workloads: %w", err)
		}
	}
	c := contendersOf(snapshots)
	h := supersededPods(dl, pods.Items, rss.Items, sets.Items, c)
	if marksHolder(pods.Items, h) {
		live, err := r.livePods(ctx, pods.Items, h.Marks)
		if err != nil {
			return false, err
		}
		pods.Items = live
		h = supersededPods(dl, pods.Items, rss.Items, sets.Items, c)
	}
	marks := maps.Clone(h.Marks)
	maps.Copy(marks, h.HolderMarks)
	var marked []string
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		want, have := marks[p.Name], p.Annotations[batonv1.AnnotationSuperseded]
		if want == have || !usesLock(p.Namespace, p.Annotations, dl) {
			continue // nothing to change, or another lock's pod (its own reconcile deals with it)
		}
		var value any // null removes the annotation
		if want != "" {
			value = want
			marked = append(marked, p.Name)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{batonv1.AnnotationSuperseded: value}}})
		if err != nil {
			return false, err
		}
		if err := r.Client.Patch(ctx, p, client.RawPatch("application/merge-patch+json", patch)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("annotating pod %s/%s %s: %w", p.Namespace, p.Name, batonv1.AnnotationSuperseded, err))
		}
	}
	if len(marked) > 0 {
		slices.Sort(marked)
		msg := marks[marked[0]]
		logf.FromContext(ctx).Info("pods superseded by the newest revision", "pods", marked, "why", msg)
		r.Recorder.Eventf(dl, nil, corev1.EventTypeNormal, reasonSuperseded, "handoff",
			"pods %s give up the lock: %s", strings.Join(marked, ", "), cmp.Or(msg, "a newer revision waits"))
	}
	return h.Pending, errors.Join(errs...)
}

// marksHolder reports whether h marks an old holder that does not carry its mark yet.
func marksHolder(pods []corev1.Pod, h handoff) bool {
	for i := range pods {
		if _, ok := h.HolderMarks[pods[i].Name]; ok && pods[i].Annotations[batonv1.AnnotationSuperseded] == "" {
			return true
		}
	}
	return false
}

// livePods returns pods with those named in names read again from the API server itself
// (APIReader, else Client); those that are gone are left out.
func (r *DistributedLockReconciler) livePods(ctx context.Context, pods []corev1.Pod, names map[string]string) ([]corev1.Pod, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	out := make([]corev1.Pod, 0, len(pods))
	for i := range pods {
		p := pods[i]
		if _, ok := names[p.Name]; ok {
			if err := reader.Get(ctx, client.ObjectKeyFromObject(&p), &p); apierrors.IsNotFound(err) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("reading pod %s/%s before marking the old holder: %w", p.Namespace, p.Name, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}
