package controllers_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

func ownedBy(kind, name string) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: new(true)}}
}

func replicaSet(ns, deployment string, revision string) appsv1.ReplicaSet {
	return appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: deployment + "-" + revision,
		Annotations: map[string]string{"deployment.kubernetes.io/revision": revision}, OwnerReferences: ownedBy("Deployment", deployment)}}
}

func lockPod(ns, name, lockName string, owners []metav1.OwnerReference, labels map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: owners,
		Annotations: map[string]string{inject.AnnotationLock: lockName}}}
}

// TestSupersededPods: a pod of an older revision of its Deployment or StatefulSet is marked once a
// pod of the newest revision holds or waits for the lock, naming it; not before (the rollout is
// pending), not with handoff QueueOrder, and never a pod of another lock, a pod being deleted, or
// a pod without a workload.
func TestSupersededPods(t *testing.T) {
	const ns = "shop"
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader"},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{"leader"}, Handoff: batonv1.HandoffNewestRevision}}
	rss := []appsv1.ReplicaSet{replicaSet(ns, "web", "1"), replicaSet(ns, "web", "2"), replicaSet(ns, "other", "7")}
	sets := []appsv1.StatefulSet{{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"},
		Status: appsv1.StatefulSetStatus{UpdateRevision: "db-b", CurrentRevision: "db-a"}}}
	deleting := lockPod(ns, "web-1-gone", "leader", ownedBy("ReplicaSet", "web-1"), nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	pods := []corev1.Pod{
		lockPod(ns, "web-1-a", "leader", ownedBy("ReplicaSet", "web-1"), nil),
		lockPod(ns, "web-1-b", "leader", ownedBy("ReplicaSet", "web-1"), nil),
		lockPod(ns, "web-2-a", "leader", ownedBy("ReplicaSet", "web-2"), nil),
		deleting,
		lockPod(ns, "other-7-a", "another-lock", ownedBy("ReplicaSet", "web-1"), nil),
		lockPod(ns, "bare", "leader", nil, nil),
		lockPod(ns, "db-0", "leader", ownedBy("StatefulSet", "db"), map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-a"}),
		lockPod(ns, "db-1", "leader", ownedBy("StatefulSet", "db"), map[string]string{appsv1.ControllerRevisionHashLabelKey: "db-b"}),
	}
	marked := func(h controllers.Handoff) []string { // both kinds
		all := maps.Clone(h.Marks)
		maps.Copy(all, h.HolderMarks)
		return slices.Sorted(maps.Keys(all))
	}

	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[ns+"/"+n] = true
		}
		return m
	}
	// Only old pods contend: nothing is marked yet, and the rollout is pending.
	h := controllers.SupersededPods(dl, pods, rss, sets, controllers.Contenders{Holders: set("web-1-a", "db-0"), Waiters: set("web-1-b")})
	if len(h.Marks) != 0 || !h.Pending {
		t.Errorf("before a new pod queues: marks %v, pending %v; want none, pending", h.Marks, h.Pending)
	}
	// A new pod of each workload queues: the old pods that wait are marked first (they leave the
	// queue), and the old holder of the Deployment only once no old pod of it waits.
	h = controllers.SupersededPods(dl, pods, rss, sets, controllers.Contenders{Holders: set("web-1-a", "db-0"), Waiters: set("web-1-b", "web-2-a", "db-1")})
	if got, want := marked(h), []string{"db-0", "web-1-b"}; !slices.Equal(got, want) || !h.Pending {
		t.Fatalf("new pods queue behind an old waiter: marked %v (pending %v), want %v and pending", got, h.Pending, want)
	}
	h = controllers.SupersededPods(dl, pods, rss, sets, controllers.Contenders{Holders: set("web-1-a"), Waiters: set("web-2-a", "db-1")})
	if got, want := marked(h), []string{"db-0", "web-1-a", "web-1-b"}; !slices.Equal(got, want) || h.Pending {
		t.Fatalf("once no old pod waits: marked %v (pending %v), want %v", got, h.Pending, want)
	}
	if got := slices.Sorted(maps.Keys(h.HolderMarks)); !slices.Equal(got, []string{"web-1-a"}) {
		t.Fatalf("once no old pod waits: holder marks %v, want the old holder web-1-a", got)
	}
	if m := h.HolderMarks["web-1-a"]; !strings.Contains(m, "revision 1 of Deployment/web superseded: a pod of the newest revision waits") {
		t.Errorf("mark of web-1-a: %q", m)
	}
	if m := h.Marks["db-0"]; !strings.Contains(m, "revision db-a of StatefulSet/db superseded: a pod of the newest revision waits") {
		t.Errorf("mark of db-0: %q", m)
	}
	// QueueOrder: nothing.
	dl.Spec.Handoff = batonv1.HandoffQueueOrder
	if h := controllers.SupersededPods(dl, pods, rss, sets, controllers.Contenders{Waiters: set("web-2-a")}); len(h.Marks) != 0 || h.Pending {
		t.Errorf("with handoff QueueOrder: %+v, want nothing", h)
	}
}

// TestHandoffMarksPodsOnTheAPIServer: the reconciler, reading a store where an old pod holds the
// lock and a pod of the newest revision waits, annotates the old pod baton.dev/superseded on the
// real API server and records an Event; once the DistributedLock's handoff is QueueOrder again it
// removes the annotation.
func TestHandoffMarksPodsOnTheAPIServer(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader"},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{"leader"}, Handoff: batonv1.HandoffNewestRevision}}
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	for _, rev := range []string{"1", "2"} {
		rs := replicaSet(ns, "web", rev)
		rs.Spec = appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"rev": rev}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"rev": rev}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}}
		if err := c.Create(ctx, &rs); err != nil {
			t.Fatal(err)
		}
	}
	old := lockPod(ns, "web-1-a", "leader", ownedBy("ReplicaSet", "web-1"), nil)
	oldWaiter := lockPod(ns, "web-1-b", "leader", ownedBy("ReplicaSet", "web-1"), nil)
	newer := lockPod(ns, "web-2-a", "leader", ownedBy("ReplicaSet", "web-2"), nil)
	for _, p := range []*corev1.Pod{&old, &oldWaiter, &newer} {
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app"}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	mem := memstore.New()
	store := mem.Client(1, memstore.Faults{})
	lockID := sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, "leader")
	held, err := newLocker(t, store, sidecarcontract.OwnerIdentity(ns, old.Name, string(old.UID))).Acquire(ctx, lockID)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	queue := func(pod *corev1.Pod, seed uint64) context.CancelFunc {
		waitCtx, stopWaiting := context.WithCancel(ctx)
		go func() {
			_, _ = newLocker(t, mem.Client(seed, memstore.Faults{}), sidecarcontract.OwnerIdentity(ns, pod.Name, string(pod.UID))).Acquire(waitCtx, lockID)
		}()
		return stopWaiting
	}
	leave := queue(&oldWaiter, 2)
	defer leave()
	time.Sleep(500 * time.Millisecond) // the old pod queues first
	defer queue(&newer, 3)()
	rec := &events{}
	var now atomic.Int64 // the reconciler's clock, moved by hand
	now.Store(time.Now().UnixNano())
	r := &controllers.DistributedLockReconciler{Client: c, Recorder: rec, Interval: time.Hour, Stores: source{store},
		Now: func() time.Time { return time.Unix(0, now.Load()) }}
	markOf := func(pod *corev1.Pod) string {
		t.Helper()
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		return p.Annotations[batonv1.AnnotationSuperseded]
	}
	mark := func() string { return markOf(&old) }
	reconcileUntil := func(what string, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !done() {
			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)})
			if err != nil {
				t.Fatal(err)
			}
			if !done() && res.RequeueAfter > time.Second {
				t.Fatalf("reconcile during the rollout: requeue after %v, want at most 1s", res.RequeueAfter)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The new pod queues: the old waiter is marked, the old holder not while the old waiter waits.
	reconcileUntil("the old waiter marked", func() bool { return markOf(&oldWaiter) != "" })
	if m := mark(); m != "" {
		t.Fatalf("the old holder was marked while an old pod still waits: %q", m)
	}
	// Its sidecar leaves the queue: the holder is marked only once the waiter's mark has been in
	// place for two readings of its sidecar (2s on the reconciler's clock).
	leave()
	reconcileUntil("the old waiter out of the queue", func() bool {
		s, err := lock.Inspect(ctx, store, lockID)
		return err == nil && len(s.Queue) == 1
	})
	for range 3 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatal(err)
		}
	}
	if m := mark(); m != "" {
		t.Fatalf("the old holder was marked as soon as the old waiter left, before its mark settled: %q", m)
	}
	now.Add(int64(2 * time.Second))
	reconcileUntil("the old holder marked", func() bool { return mark() != "" })
	if m := mark(); !strings.Contains(m, "a pod of the newest revision waits") {
		t.Errorf("mark %q", m)
	}
	if !rec.find(controllers.ReasonSuperseded, "web-1-a give up the lock") || !rec.find(controllers.ReasonSuperseded, "web-1-b give up the lock") {
		t.Errorf("no Superseded event: %s", rec)
	}
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&newer), &p); err != nil || p.Annotations[batonv1.AnnotationSuperseded] != "" {
		t.Errorf("the new pod is marked: %v, %v", p.Annotations, err)
	}

	// Back to QueueOrder: the mark goes.
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), dl); err != nil {
		t.Fatal(err)
	}
	dl.Spec.Handoff = batonv1.HandoffQueueOrder
	if err := c.Update(ctx, dl); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
		t.Fatal(err)
	}
	if m, w := mark(), markOf(&oldWaiter); m != "" || w != "" {
		t.Errorf("marks %q and %q after handoff went back to QueueOrder, want none", m, w)
	}
}
