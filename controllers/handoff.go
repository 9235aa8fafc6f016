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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
)

// ReasonSuperseded is the Event reason when the operator marks pods of older revisions
// superseded (spec.handoff NewestRevision).
const ReasonSuperseded = "Superseded"

// handoffPoll is how often the reconciler re-reads the lock store while a rollout under handoff
// NewestRevision waits for a pod of the newest revision to queue: the store has no watch, and no
// Kubernetes event says when a sidecar queued.
const handoffPoll = time.Second

// revisionAnnotation is the Deployment controller's revision number on each ReplicaSet.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// handoffSettle is how long the marks of the old pods that do not hold must have been in place
// before the old holder is marked: two readings of their sidecars (every second with handoff
// NewestRevision), so that none of them can queue again after the holder's release (a Try-mode
// app may ask again between two waits, and its sidecar refuses only once it has read its mark).
const handoffSettle = 2 * time.Second

// Handoff is what handoff NewestRevision asks of the pods of one DistributedLock: the value of
// the annotation baton.dev/superseded each should carry, by pod name. Pods in neither map should
// not carry it.
type Handoff struct {
	// Marks are for the old pods that do not hold a lock: marked as soon as a pod of the newest
	// revision holds or waits, they leave the queue.
	Marks map[string]string
	// HolderMarks are for the old holders, once no old pod of their workload waits; the caller
	// marks them once the Marks have been in place for handoffSettle.
	HolderMarks map[string]string
	// Pending is true while some workload of the lock has pods of an older revision that are not
	// marked because no pod of its newest revision holds or waits for the lock yet, or an old
	// holder that is not marked because an old pod still waits.
	Pending bool
}

// podRevision places a pod in its workload's history.
type podRevision struct {
	workload string // "Deployment/<name>" or "StatefulSet/<name>"
	revision string // as the workload names it: a number (Deployment) or a ControllerRevision name
	newest   bool
}

// Contenders are the pods holding or waiting for a DistributedLock's locks, from the store, by
// "namespace/name".
type Contenders struct {
	Holders, Waiters map[string]bool
}

// SupersededPods works out handoff NewestRevision for dl: a pod of a Deployment or StatefulSet
// using dl is superseded when it is not of the workload's newest revision (the ReplicaSet with the
// highest deployment.kubernetes.io/revision; the StatefulSet's status.updateRevision) while a pod
// of the newest revision holds or waits for one of dl's locks. Old pods that wait are marked
// first; an old holder only once no old pod of its workload waits any more, so that its release
// goes straight to a pod of the newest revision. Pods of other owners, and pods being deleted, are
// never marked. With another handoff policy no pod is marked.
func SupersededPods(dl *batonv1.DistributedLock, pods []corev1.Pod, replicaSets []appsv1.ReplicaSet,
	statefulSets []appsv1.StatefulSet, c Contenders) Handoff {
	out := Handoff{Marks: map[string]string{}, HolderMarks: map[string]string{}}
	if dl.Spec.Handoff != batonv1.HandoffNewestRevision {
		return out
	}
	type rsInfo struct {
		deployment string
		revision   int64
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

	revisions := make(map[string]podRevision)
	newestContends := make(map[string]bool) // by workload: a pod of its newest revision holds or waits
	oldWaits := make(map[string]bool)       // by workload: a pod of an older revision waits
	for i := range pods {
		p := &pods[i]
		if !usesLock(p.Namespace, p.Annotations, dl) || p.DeletionTimestamp != nil {
			continue
		}
		owner := metav1.GetControllerOf(p)
		if owner == nil {
			continue
		}
		var r podRevision
		switch owner.Kind {
		case "ReplicaSet":
			rs, ok := rsByName[owner.Name]
			if !ok {
				continue
			}
			r = podRevision{workload: "Deployment/" + rs.deployment, revision: strconv.FormatInt(rs.revision, 10),
				newest: rs.revision == newestOf[rs.deployment]}
		case "StatefulSet":
			s, ok := setByName[owner.Name]
			if !ok || s.Status.UpdateRevision == "" {
				continue
			}
			rev := p.Labels[appsv1.ControllerRevisionHashLabelKey]
			r = podRevision{workload: "StatefulSet/" + s.Name, revision: rev, newest: rev == s.Status.UpdateRevision}
		default:
			continue
		}
		revisions[p.Name] = r
		key := p.Namespace + "/" + p.Name
		switch {
		case r.newest && (c.Holders[key] || c.Waiters[key]):
			newestContends[r.workload] = true
		case !r.newest && c.Waiters[key] && !c.Holders[key]:
			oldWaits[r.workload] = true
		}
	}
	for name, r := range revisions {
		if r.newest {
			continue
		}
		holds := c.Holders[dl.Namespace+"/"+name]
		if !newestContends[r.workload] || (holds && oldWaits[r.workload]) {
			out.Pending = true
			continue
		}
		// The same value for every old pod and every reconcile of this rollout: a mark is written
		// once.
		mark := fmt.Sprintf("revision %s of %s superseded: a pod of the newest revision waits for the lock", r.revision, r.workload)
		if holds {
			out.HolderMarks[name] = mark
		} else {
			out.Marks[name] = mark
		}
	}
	return out
}

// contenders lists the pods holding or waiting for one of the locks in snapshots.
func contenders(snapshots map[string]lock.Status) Contenders {
	c := Contenders{Holders: map[string]bool{}, Waiters: map[string]bool{}}
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

// handoff marks and unmarks the pods of dl as SupersededPods says, and reports whether a rollout
// waits for a pod of the newest revision to queue (the caller then reads the store again soon).
// Pods are marked even when dl's handoff is not NewestRevision (any more): then every mark is
// removed, so no sidecar stays away from its locks.
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
	h := SupersededPods(dl, pods.Items, rss.Items, sets.Items, contenders(snapshots))
	marks := r.withHolderMarks(dl, pods.Items, &h)
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
		r.Recorder.Eventf(dl, nil, corev1.EventTypeNormal, ReasonSuperseded, "Handoff",
			"pods %s give up the lock: %s", strings.Join(marked, ", "), cmp.Or(msg, "a newer revision waits"))
	}
	return h.Pending, errors.Join(errs...)
}

// withHolderMarks returns the marks to apply for dl: h's Marks, and its HolderMarks of holders
// already marked, or of all once every Mark has been in place (as the cache shows the pods) for
// handoffSettle. Otherwise it sets h.Pending, so that the caller looks again soon.
func (r *DistributedLockReconciler) withHolderMarks(dl *batonv1.DistributedLock, pods []corev1.Pod, h *Handoff) map[string]string {
	have := make(map[string]string, len(pods))
	for i := range pods {
		have[pods[i].Name] = pods[i].Annotations[batonv1.AnnotationSuperseded]
	}
	settled := true
	for name, want := range h.Marks {
		if have[name] != want {
			settled = false
		}
	}
	key := client.ObjectKeyFromObject(dl)
	now := r.now()
	r.handoffMu.Lock()
	if r.marksSettledSince == nil {
		r.marksSettledSince = make(map[types.NamespacedName]time.Time)
	}
	since, ok := r.marksSettledSince[key]
	switch {
	case !settled || len(h.HolderMarks) == 0:
		delete(r.marksSettledSince, key)
	case !ok:
		since = now
		r.marksSettledSince[key] = now
	}
	r.handoffMu.Unlock()
	ready := settled && (len(h.Marks) == 0 || now.Sub(since) >= handoffSettle)

	marks := maps.Clone(h.Marks)
	for name, mark := range h.HolderMarks {
		if ready || have[name] != "" {
			marks[name] = mark
		} else {
			h.Pending = true
		}
	}
	return marks
}
