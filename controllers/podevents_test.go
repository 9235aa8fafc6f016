package controllers

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// addLog is a work queue that records each Add and when it came; nothing else of it is used.
type addLog struct {
	workQueue // nil: any other method panics
	mu        sync.Mutex
	adds      []added
}

type added struct {
	req reconcile.Request
	at  time.Time
}

func (q *addLog) Add(req reconcile.Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.adds = append(q.adds, added{req, time.Now()})
}

func (q *addLog) list() []added {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]added(nil), q.adds...)
}

func lockPod(name, lockName, rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: rv,
		Annotations: map[string]string{batonv1.AnnotationLock: lockName}}}
}

func req(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "shop", Name: name}}
}

// TestPodEventsFollowUpOncePerBurst: a pod change enqueues its lock at once, and again at each
// follow-up counted from the last change of a burst, never earlier; a resync (same
// resourceVersion), a pod naming no lock and the initial list add no follow-up. An in-memory work
// queue, no API server.
func TestPodEventsFollowUpOncePerBurst(t *testing.T) {
	after := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}
	h := newPodEvents(podLocks, after...)
	q := &addLog{}
	ctx := context.Background()

	h.Create(ctx, event.CreateEvent{Object: lockPod("web-a", "orders", "1")}, q)
	h.Update(ctx, event.UpdateEvent{ObjectOld: lockPod("web-a", "orders", "1"), ObjectNew: lockPod("web-a", "orders", "2")}, q)
	last := time.Now()
	h.Update(ctx, event.UpdateEvent{ObjectOld: lockPod("web-a", "orders", "2"), ObjectNew: lockPod("web-a", "orders", "3")}, q)
	if got := len(q.list()); got != 3 {
		t.Fatalf("%d adds right after three changes, want 3 (one each, at once)", got)
	}
	testenv.WaitFor(t, "the two follow-ups", 10*time.Second, func() bool { return len(q.list()) == 5 })
	for i, f := range q.list()[3:] {
		if f.req != req("orders") || f.at.Sub(last) < after[i] {
			t.Errorf("follow-up %d: %v %v after the last change, want orders no sooner than %v", i, f.req, f.at.Sub(last), after[i])
		}
	}
	if n := h.pending(); n != 0 {
		t.Errorf("%d follow-ups still pending after those of the burst fired, want 0", n)
	}

	// Nothing that is not a change of a lock's pod arms a follow-up.
	h.Update(ctx, event.UpdateEvent{ObjectOld: lockPod("web-a", "orders", "3"), ObjectNew: lockPod("web-a", "orders", "3")}, q)
	h.Create(ctx, event.CreateEvent{Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "plain"}}}, q)
	h.Create(ctx, event.CreateEvent{Object: lockPod("web-b", "billing", "4"), IsInInitialList: true}, q)
	if got, n := q.list(), h.pending(); len(got) != 6 || got[5].req != req("billing") || n != 0 {
		t.Errorf("after a resync, a pod without a lock and an initial-list pod: adds %v, %d follow-ups pending; want one more add (billing) and none pending", got[5:], n)
	}

	// A pod moved to another lock: both locks, each with its follow-ups.
	h.Update(ctx, event.UpdateEvent{ObjectOld: lockPod("web-a", "orders", "3"), ObjectNew: lockPod("web-a", "billing", "5")}, q)
	testenv.WaitFor(t, "the follow-ups of both locks", 10*time.Second, func() bool { return len(q.list()) == 12 })
	seen := map[reconcile.Request]int{}
	for _, a := range q.list()[6:] {
		seen[a.req]++
	}
	if seen[req("orders")] != 3 || seen[req("billing")] != 3 {
		t.Errorf("adds after the move %v, want orders and billing three times each", seen)
	}
	if n := h.pending(); n != 0 {
		t.Errorf("%d follow-ups still pending, want 0", n)
	}
}
