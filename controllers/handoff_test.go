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
	"github.com/baton-dev/baton/internal/testing/testenv"
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
		Annotations: map[string]string{batonv1.AnnotationLock: lockName}}}
}

// createRollout creates, in ns, a DistributedLock "leader" with handoff NewestRevision, the
// ReplicaSets of revisions 1 and 2 of Deployment "web", and three pods using the lock: web-1-a
// and web-1-b of the old revision, web-2-a of the newest.
func createRollout(ctx context.Context, t *testing.T, c client.Client, ns string) (dl *batonv1.DistributedLock, oldA, oldB, newer corev1.Pod) {
	t.Helper()
	dl = &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader"},
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
	oldA = lockPod(ns, "web-1-a", "leader", ownedBy("ReplicaSet", "web-1"), nil)
	oldB = lockPod(ns, "web-1-b", "leader", ownedBy("ReplicaSet", "web-1"), nil)
	newer = lockPod(ns, "web-2-a", "leader", ownedBy("ReplicaSet", "web-2"), nil)
	for _, p := range []*corev1.Pod{&oldA, &oldB, &newer} {
		p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app"}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	return dl, oldA, oldB, newer
}

// supersededMark reads pod from the API server and returns its baton.dev/superseded mark.
func supersededMark(ctx context.Context, t *testing.T, c client.Client, pod *corev1.Pod) string {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
		t.Fatal(err)
	}
	return p.Annotations[batonv1.AnnotationSuperseded]
}

// steppedAside returns p as its sidecar leaves it once it stepped aside for mark: annotated, with
// the condition baton.dev/stepped-aside True and the mark as its message.
func steppedAside(p corev1.Pod, mark string) corev1.Pod {
	p = *p.DeepCopy()
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[batonv1.AnnotationSuperseded] = mark
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: batonv1.ConditionSteppedAside,
		Status: corev1.ConditionTrue, Reason: "Superseded", Message: mark})
	return p
}

// TestSupersededPods: a pod of an older revision of its Deployment or StatefulSet is marked once a
// pod of the newest revision holds or waits for the lock, naming it; not before (the rollout is
// pending), not with handoff QueueOrder, and never a pod of another lock or a pod without a
// workload. The old holder is marked only once every old pod of its workload that does not hold
// has left the queue and stepped aside for its mark, or is being deleted and its sidecar stopped;
// once marked, it stays marked.
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
	// A new pod of each workload queues: the old pods that do not hold are marked first, the one
	// being deleted too (its sidecar runs until its app stops), and the old holder of the
	// Deployment not while an old pod of it waits.
	h = controllers.SupersededPods(dl, pods, rss, sets, controllers.Contenders{Holders: set("web-1-a", "db-0"), Waiters: set("web-1-b", "web-2-a", "db-1")})
	if got, want := marked(h), []string{"db-0", "web-1-b", "web-1-gone"}; !slices.Equal(got, want) || !h.Pending {
		t.Fatalf("new pods queue behind an old waiter: marked %v (pending %v), want %v and pending", got, h.Pending, want)
	}
	mark, dbMark := h.Marks["web-1-b"], h.HolderMarks["db-0"] // db-0 holds, and no other old pod of db runs
	if !strings.Contains(mark, "revision 1 of Deployment/web superseded: a pod of the newest revision waits") {
		t.Errorf("mark of web-1-b: %q", mark)
	}
	if !strings.Contains(dbMark, "revision db-a of StatefulSet/db superseded: a pod of the newest revision waits") {
		t.Errorf("mark of db-0: %q", dbMark)
	}
	// No old pod waits any more, but they have not stepped aside: the old holder waits.
	waiting := controllers.Contenders{Holders: set("web-1-a"), Waiters: set("web-2-a", "db-1")}
	h = controllers.SupersededPods(dl, pods, rss, sets, waiting)
	if len(h.HolderMarks) != 0 || !h.Pending {
		t.Fatalf("no old pod waits, none stepped aside: holder marks %v (pending %v), want none and pending", h.HolderMarks, h.Pending)
	}
	// web-1-b steps aside for another mark, or says it stepped aside without carrying the mark;
	// the pod being deleted has not stopped its sidecar: not enough.
	withPods := func(replace ...corev1.Pod) []corev1.Pod {
		out := slices.Clone(pods)
		for _, r := range replace {
			for i := range out {
				if out[i].Name == r.Name {
					out[i] = r
				}
			}
		}
		return out
	}
	stopped := *deleting.DeepCopy()
	stopped.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: inject.ContainerName,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}}
	running := *deleting.DeepCopy()
	running.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: inject.ContainerName,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	unmarked := steppedAside(pods[1], mark)
	delete(unmarked.Annotations, batonv1.AnnotationSuperseded)
	for name, ps := range map[string][]corev1.Pod{
		"stepped aside for another mark": withPods(steppedAside(pods[1], "revision 0 of Deployment/web superseded"), stopped),
		"the condition without the mark": withPods(unmarked, stopped),
		"a deleting pod's sidecar runs":  withPods(steppedAside(pods[1], mark), running),
	} {
		if h := controllers.SupersededPods(dl, ps, rss, sets, waiting); len(h.HolderMarks) != 0 || !h.Pending {
			t.Errorf("%s: holder marks %v (pending %v), want none and pending", name, h.HolderMarks, h.Pending)
		}
	}
	// web-1-b stepped aside for its mark and the deleting pod's sidecar stopped (or it stepped
	// aside too): the old holder is marked.
	for name, ps := range map[string][]corev1.Pod{
		"the deleting pod's sidecar stopped":       withPods(steppedAside(pods[1], mark), stopped),
		"the deleting pod's sidecar stepped aside": withPods(steppedAside(pods[1], mark), steppedAside(running, mark)),
	} {
		h = controllers.SupersededPods(dl, ps, rss, sets, waiting)
		if got, want := marked(h), []string{"db-0", "web-1-a", "web-1-b", "web-1-gone"}; !slices.Equal(got, want) || h.Pending {
			t.Fatalf("%s: marked %v (pending %v), want %v", name, got, h.Pending, want)
		}
		if got := slices.Sorted(maps.Keys(h.HolderMarks)); !slices.Equal(got, []string{"web-1-a"}) || h.HolderMarks["web-1-a"] != mark {
			t.Fatalf("%s: holder marks %v, want the old holder web-1-a with %q", name, h.HolderMarks, mark)
		}
	}
	// Once marked, the old holder keeps its mark, even if an old pod waits again.
	holder := *pods[0].DeepCopy()
	holder.Annotations[batonv1.AnnotationSuperseded] = mark
	h = controllers.SupersededPods(dl, withPods(holder), rss, sets, controllers.Contenders{Holders: set("web-1-a"), Waiters: set("web-1-b", "web-2-a")})
	if h.HolderMarks["web-1-a"] != mark {
		t.Errorf("a marked old holder while an old pod waits again: holder marks %v, want it kept", h.HolderMarks)
	}
	// An old holder being deleted is not marked: it releases as it stops.
	leaving := *pods[0].DeepCopy()
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if h := controllers.SupersededPods(dl, withPods(leaving, steppedAside(pods[1], mark), stopped), rss, sets, waiting); len(h.HolderMarks) != 0 {
		t.Errorf("an old holder being deleted: holder marks %v, want none", h.HolderMarks)
	}
	// QueueOrder: nothing.
	dl.Spec.Handoff = batonv1.HandoffQueueOrder
	if h := controllers.SupersededPods(dl, pods, rss, sets, controllers.Contenders{Waiters: set("web-2-a")}); len(h.Marks) != 0 || h.Pending {
		t.Errorf("with handoff QueueOrder: %+v, want nothing", h)
	}
}

// TestHandoffMarksPodsOnTheAPIServer: the reconciler, reading a store where an old pod holds the
// lock and a pod of the newest revision waits, annotates the old waiter baton.dev/superseded on the
// real API server, then the old holder once the old waiter left the queue and stepped aside as the
// API server (not a cache) shows it, and records Events; once the DistributedLock's handoff is
// QueueOrder again it removes the annotations.
func TestHandoffMarksPodsOnTheAPIServer(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dl, old, oldWaiter, newer := createRollout(ctx, t, c, ns)
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
	testenv.WaitFor(t, "the old pod queues first", 30*time.Second, func() bool {
		s, err := lock.Inspect(ctx, store, lockID)
		return err == nil && len(s.Queue) == 1
	})
	defer queue(&newer, 3)()
	rec := &events{}
	// The reconciler lists pods through a cache that shows the old waiter stepped aside before its
	// sidecar did (a stale copy would show that after the sidecar withdrew); it reads them from
	// the API server itself before it marks an old holder.
	stale := &staleCache{Client: c}
	r := &controllers.DistributedLockReconciler{Client: stale, APIReader: c, Recorder: rec, Interval: time.Hour, Stores: source{store}}
	markOf := func(pod *corev1.Pod) string { return supersededMark(ctx, t, c, pod) }
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
	// Its sidecar leaves the queue: the holder is marked only once the waiter's sidecar has
	// stepped aside, as the API server shows the pod (not as the cache does).
	leave()
	reconcileUntil("the old waiter out of the queue", func() bool {
		s, err := lock.Inspect(ctx, store, lockID)
		return err == nil && len(s.Queue) == 1
	})
	waiterMark := markOf(&oldWaiter)
	stale.steppedAside.Store(waiterMark)
	for range 3 {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatal(err)
		}
	}
	if m := mark(); m != "" {
		t.Fatalf("the old holder was marked while the old waiter had not stepped aside (only a stale cache said so): %q", m)
	}
	// The old waiter's sidecar steps aside (the condition it writes).
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&oldWaiter), &p); err != nil {
		t.Fatal(err)
	}
	ack := steppedAside(p, waiterMark)
	if err := c.Status().Update(ctx, &ack); err != nil {
		t.Fatal(err)
	}
	reconcileUntil("the old holder marked", func() bool { return mark() != "" })
	if m := mark(); !strings.Contains(m, "a pod of the newest revision waits") {
		t.Errorf("mark %q", m)
	}
	if !rec.find(controllers.ReasonSuperseded, "web-1-a give up the lock") || !rec.find(controllers.ReasonSuperseded, "web-1-b give up the lock") {
		t.Errorf("no Superseded event: %s", rec)
	}
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

// staleCache is a Client whose pod lists show the condition baton.dev/stepped-aside True, for the
// mark in steppedAside, on every pod that carries that mark: as a stale cache could.
type staleCache struct {
	client.Client
	steppedAside atomic.Value // string
}

func (s *staleCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := s.Client.List(ctx, list, opts...); err != nil {
		return err
	}
	mark, _ := s.steppedAside.Load().(string)
	if pods, ok := list.(*corev1.PodList); ok && mark != "" {
		for i, p := range pods.Items {
			if p.Annotations[batonv1.AnnotationSuperseded] == mark {
				pods.Items[i] = steppedAside(p, mark)
			}
		}
	}
	return nil
}
