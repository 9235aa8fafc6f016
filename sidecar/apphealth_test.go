package sidecar

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// withYieldWhenUnready returns o with spec.yieldWhenUnready d.
func withYieldWhenUnready(o Options, d time.Duration) Options {
	o.YieldWhenUnready = d
	return o
}

// reportEvery calls h.PodReading with ready() every period until ctx ends, as a PodWatch does.
func reportEvery(ctx context.Context, h *Holder, period time.Duration, ready func() bool) {
	go func() {
		for ctx.Err() == nil {
			h.PodReading(PodReading{AppReady: ready(), Detail: "container app not ready", At: time.Now()})
			select {
			case <-ctx.Done():
			case <-time.After(period):
			}
		}
	}()
}

// TestUnreadyAppGivesUpTheLock (Blocking mode, virtual time): the holder whose app has not been
// ready for yieldWhenUnready (10s) releases, with the reason, and the waiter is granted at once.
// The yielder stays out of the queue while its app is not ready, even when the lock is free, and
// queues again once a reading shows the app ready. A holder whose app is only briefly not ready
// keeps the lock.
func TestUnreadyAppGivesUpTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const after = 10 * time.Second
		a, _ := newTestHolder(t, mem, 1, withYieldWhenUnready(testOptions(t, "a", batonv1.ModeBlocking, "orders"), after))
		b, _ := newTestHolder(t, mem, 2, withYieldWhenUnready(testOptions(t, "b", batonv1.ModeBlocking, "orders"), after))
		aEvents, stopA := a.Subscribe()
		defer stopA()
		bEvents, stopB := b.Subscribe()
		defer stopB()
		a.Start(ctx)
		first := next(t, aEvents)
		b.Start(ctx)

		var aReady, bReady atomic.Bool
		aReady.Store(true)
		bReady.Store(true)
		reportEvery(ctx, a, 2*time.Second, aReady.Load)
		reportEvery(ctx, b, 2*time.Second, bReady.Load)

		// Not ready for 6s, then ready again: a keeps the lock.
		aReady.Store(false)
		time.Sleep(6 * time.Second)
		aReady.Store(true)
		time.Sleep(10 * time.Second)
		if st, _ := a.Lock("orders"); st.State != sidecarclient.StateHeld || st.Token != first.Token {
			t.Fatalf("a after its app was not ready for 6s of 10: %+v, want still held", st)
		}

		// Not ready for good: a gives the lock up 10s after the first reading that showed it,
		// which comes within one reading period (2s), plus the release's round trip.
		aReady.Store(false)
		notReady := time.Now()
		e := next(t, aEvents)
		took := time.Since(notReady)
		if e.Type != sidecarclient.EventReleased || e.Token != first.Token || !strings.Contains(e.Reason, "the app was not ready for 1") ||
			!strings.Contains(e.Reason, "container app not ready") {
			t.Fatalf("a after its app was not ready: %+v, want released with the reason", e)
		}
		if bound := after + 2*time.Second + 100*time.Millisecond; took < after || took > bound {
			t.Errorf("a gave the lock up %v after its app was not ready, want %v to %v", took, after, bound)
		}
		if e := next(t, bEvents); e.Type != sidecarclient.EventAcquired || e.Token != first.Token+1 {
			t.Fatalf("b after a gave the lock up: %+v, want granted the next token", e)
		}
		st, _ := a.Lock("orders")
		if st.State != sidecarclient.StateIdle || !strings.Contains(st.Reason, "not queueing: the app was not ready") {
			t.Fatalf("a while its app is not ready: %+v, want idle, not queueing", st)
		}

		// b releases (its app crashed too): a, still not ready, does not take the lock.
		bReady.Store(false)
		if e := next(t, bEvents); e.Type != sidecarclient.EventReleased {
			t.Fatalf("b after its app was not ready: %+v", e)
		}
		time.Sleep(30 * time.Second)
		if st, _ := a.Lock("orders"); st.State == sidecarclient.StateHeld {
			t.Fatalf("a took the lock while its app is not ready: %+v", st)
		}
		if a.Ready() {
			t.Fatal("a is ready while not holding")
		}

		// a's app is ready again: a queues and is granted.
		aReady.Store(true)
		if e := next(t, aEvents); e.Type != sidecarclient.EventAcquired || e.Token != first.Token+2 {
			t.Fatalf("a after its app was ready again: %+v, want granted the next token", e)
		}
		cancel()
		_ = a.Shutdown(context.Background())
		_ = b.Shutdown(context.Background())
	})
}

// TestUnreadyAppCountsFromTheGrant: an app that was not ready before its pod was granted the lock
// (in Blocking mode the kubelet starts it only then) has yieldWhenUnready from the grant to
// become ready.
func TestUnreadyAppCountsFromTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const after = 10 * time.Second
		a, _ := newTestHolder(t, mem, 1, withYieldWhenUnready(testOptions(t, "a", batonv1.ModeBlocking, "orders"), after))
		aEvents, stopA := a.Subscribe()
		defer stopA()
		// Not ready for a minute before the grant.
		for range 30 {
			a.PodReading(PodReading{Detail: "container app waiting: PodInitializing", At: time.Now()})
			time.Sleep(2 * time.Second)
		}
		a.Start(ctx)
		held := next(t, aEvents)
		grant := time.Now()
		var ready atomic.Bool
		reportEvery(ctx, a, time.Second, ready.Load)
		time.Sleep(after - 2*time.Second)
		if st, _ := a.Lock("orders"); st.State != sidecarclient.StateHeld {
			t.Fatalf("a %v after its grant, app not ready since a minute before: %+v, want held", time.Since(grant), st)
		}
		ready.Store(true)
		time.Sleep(time.Minute)
		if st, _ := a.Lock("orders"); st.State != sidecarclient.StateHeld || st.Token != held.Token {
			t.Fatalf("a whose app became ready 8s after the grant: %+v, want held", st)
		}
		cancel()
		_ = a.Shutdown(context.Background())
	})
}

// TestUnreadyAppTryMode: in Try mode the holder releases once its app has not been ready for
// yieldWhenUnready, and refuses the app's acquire (ErrAppNotReady, not ErrLocked) until a reading
// shows the app ready.
func TestUnreadyAppTryMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, _ := newTestHolder(t, mem, 1, withYieldWhenUnready(testOptions(t, "a", batonv1.ModeTry, "orders"), 5*time.Second))
		a.Start(ctx)
		aEvents, stopA := a.Subscribe()
		defer stopA()
		first, err := a.Acquire(ctx, "orders", 0)
		if err != nil {
			t.Fatal(err)
		}
		next(t, aEvents)
		var ready atomic.Bool
		reportEvery(ctx, a, time.Second, ready.Load)
		if e := next(t, aEvents); e.Type != sidecarclient.EventReleased || e.Token != first.Token || !strings.Contains(e.Reason, "not ready") {
			t.Fatalf("a after its app was not ready: %+v", e)
		}
		st, err := a.Acquire(ctx, "orders", time.Second)
		if !errors.Is(err, sidecarclient.ErrAppNotReady) || errors.Is(err, sidecarclient.ErrLocked) || st.State == sidecarclient.StateHeld {
			t.Fatalf("acquire while the app is not ready: %+v, %v; want ErrAppNotReady", st, err)
		}
		ready.Store(true)
		time.Sleep(2 * time.Second)
		if st, err := a.Acquire(ctx, "orders", 0); err != nil || st.Token != first.Token+1 {
			t.Fatalf("acquire once the app is ready: %+v, %v; want the next token", st, err)
		}
		cancel()
		_ = a.Shutdown(context.Background())
	})
}

// TestNoReadingsKeepTheLock: without readings (the API server is unreachable) the holder keeps its
// lock however long; yieldWhenUnready off ignores readings.
func TestNoReadingsKeepTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, _ := newTestHolder(t, mem, 1, withYieldWhenUnready(testOptions(t, "a", batonv1.ModeBlocking, "orders"), 5*time.Second))
		off, _ := newTestHolder(t, mem, 2, testOptions(t, "off", batonv1.ModeBlocking, "other"))
		aEvents, stopA := a.Subscribe()
		defer stopA()
		offEvents, stopOff := off.Subscribe()
		defer stopOff()
		a.Start(ctx)
		off.Start(ctx)
		next(t, aEvents)
		next(t, offEvents)
		a.PodReading(PodReading{Detail: "container app not ready", At: time.Now()})
		time.Sleep(time.Minute) // no reading since
		reportEvery(ctx, off, time.Second, func() bool { return false })
		time.Sleep(time.Minute)
		for _, h := range []*Holder{a, off} {
			if !h.Ready() {
				t.Errorf("%s gave its lock up: %+v", h.opts.Pod.Name, h.Locks())
			}
		}
		cancel()
		_ = a.Shutdown(context.Background())
		_ = off.Shutdown(context.Background())
	})
}

// TestAppContainersReady: every container of spec.containers must be ready; the sidecar (an init
// container) does not count.
func TestAppContainersReady(t *testing.T) {
	pod := func(statuses ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "baton-sidecar"}},
				Containers:     []corev1.Container{{Name: "app"}, {Name: "proxy"}},
			},
			Status: corev1.PodStatus{
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "baton-sidecar", Ready: false}},
				ContainerStatuses:     statuses,
			},
		}
	}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, c := range []struct {
		name   string
		pod    *corev1.Pod
		ready  bool
		detail string
	}{
		{"all ready", pod(corev1.ContainerStatus{Name: "app", Ready: true}, corev1.ContainerStatus{Name: "proxy", Ready: true}), true, ""},
		{"one not ready", pod(corev1.ContainerStatus{Name: "app", Ready: true}, corev1.ContainerStatus{Name: "proxy", State: running}), false,
			"container proxy not ready"},
		{"crash loop", pod(corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			corev1.ContainerStatus{Name: "proxy", Ready: true}), false, "container app waiting: CrashLoopBackOff"},
		{"exited", pod(corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error"}}},
			corev1.ContainerStatus{Name: "proxy", Ready: true}), false, "container app terminated: Error"},
		{"no status", pod(corev1.ContainerStatus{Name: "app", Ready: true}), false, "container proxy has no status yet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ready, detail := appContainersReady(c.pod)
			if ready != c.ready || detail != c.detail {
				t.Errorf("appContainersReady = %v, %q; want %v, %q", ready, detail, c.ready, c.detail)
			}
		})
	}
}

// TestPodWatchReportsOnlyReadings (in-memory fake clientset): each reading is reported; a failed
// reading, or a pod of the same name with another UID, reports nothing.
func TestPodWatchReportsOnlyReadings(t *testing.T) {
	o := withYieldWhenUnready(testOptions(t, "a", batonv1.ModeBlocking, "orders"), 5*time.Second)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Pod.Namespace, Name: o.Pod.Name, UID: types.UID(o.Pod.UID)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}}},
	}
	cs := fake.NewClientset(pod)
	type reading struct {
		ready  bool
		detail string
	}
	var got []reading
	w := NewPodWatch(cs, o, readingsFunc(func(r PodReading) { got = append(got, reading{r.AppReady, r.Detail}) }), logr.Discard())
	ctx := context.Background()
	w.readOnce(ctx)
	failing := true
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	w.readOnce(ctx)
	failing = false
	pod.Status.ContainerStatuses[0].Ready = false
	if _, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.readOnce(ctx)
	w.uid = "another-uid"
	w.readOnce(ctx)
	want := []reading{{true, ""}, {false, "container app not ready"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("readings reported: %+v, want %+v", got, want)
	}
	for _, c := range []struct {
		yieldWhenUnready time.Duration
		handoff          batonv1.HandoffPolicy
		want             time.Duration
	}{
		{30 * time.Second, batonv1.HandoffQueueOrder, 5 * time.Second},
		{time.Second, batonv1.HandoffQueueOrder, 500 * time.Millisecond},
		{30 * time.Second, batonv1.HandoffNewestRevision, time.Second},
		{0, batonv1.HandoffNewestRevision, time.Second},
	} {
		o.YieldWhenUnready, o.Handoff = c.yieldWhenUnready, c.handoff
		if p := podWatchPeriod(o); p != c.want {
			t.Errorf("period for yieldWhenUnready %v, handoff %s: %v, want %v", c.yieldWhenUnready, c.handoff, p, c.want)
		}
	}
}

// readingsFunc is a PodReader that calls itself with each reading and never steps aside.
type readingsFunc func(PodReading)

func (f readingsFunc) PodReading(r PodReading)                            { f(r) }
func (f readingsFunc) SteppedAside(ctx context.Context, mark string) bool { return false }

// withNewestRevision returns o with spec.handoff NewestRevision.
func withNewestRevision(o Options) Options {
	o.Handoff = batonv1.HandoffNewestRevision
	return o
}

// TestSupersededPodsStepAside (Blocking mode, virtual time): a holds the lock, b and c wait in
// that order. The operator marks b superseded (c is of the newest revision), b leaves the queue at
// its next reading; then it marks a, which releases at its next reading, and the lock goes straight
// to c: b is never granted.
// Neither takes it again while marked; b queues again once its mark is removed (a rollback).
func TestSupersededPodsStepAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		read := func(h *Holder, mark *atomic.Value) {
			go func() {
				for ctx.Err() == nil {
					h.PodReading(PodReading{AppReady: true, Superseded: mark.Load().(string), At: time.Now()})
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}()
		}
		var holders []*Holder
		var events []<-chan sidecarclient.Event
		var aMark, bMark, cMark atomic.Value
		for i, name := range []string{"a", "b", "c"} {
			h, _ := newTestHolder(t, mem, uint64(i+1), withNewestRevision(testOptions(t, name, batonv1.ModeBlocking, "orders")))
			ev, stop := h.Subscribe()
			defer stop()
			h.Start(ctx)
			mark := []*atomic.Value{&aMark, &bMark, &cMark}[i]
			mark.Store("")
			read(h, mark) // with handoff NewestRevision a holder takes nothing before its first reading
			holders, events = append(holders, h), append(events, ev)
			time.Sleep(time.Second) // queue in this order
		}
		a, b := holders[0], holders[1]
		first := next(t, events[0])
		time.Sleep(3 * time.Second)
		if st, _ := b.Lock("orders"); st.State != sidecarclient.StateWaiting || st.QueuePosition != 1 {
			t.Fatalf("b before the rollout: %+v, want first in the queue", st)
		}

		// As the operator does: the old waiter first, the old holder once the waiter left.
		const mark = "revision 1 superseded: a pod of revision 2 waits for the lock"
		bMark.Store(mark)
		for {
			time.Sleep(100 * time.Millisecond)
			if st, _ := b.Lock("orders"); st.State == sidecarclient.StateIdle {
				break
			}
		}
		aMark.Store(mark)
		marked := time.Now()
		if e := next(t, events[0]); e.Type != sidecarclient.EventReleased || !strings.Contains(e.Reason, "superseded: "+mark) {
			t.Fatalf("a once superseded: %+v, want released, superseded", e)
		}
		if e := next(t, events[2]); e.Type != sidecarclient.EventAcquired || e.Token <= first.Token {
			t.Fatalf("c after a and b were superseded: %+v, want granted a larger token", e)
		}
		select {
		case e := <-events[1]:
			t.Fatalf("b, superseded while waiting: %+v, want no event (never granted)", e)
		default:
		}
		// One reading period (1s) for a to see the mark, and without hints (none here) up to one
		// waiter poll (1s) for c to see that it is first.
		if took := time.Since(marked); took > 2100*time.Millisecond {
			t.Errorf("c was granted %v after a's mark, want within one reading period and one waiter poll (2s)", took)
		}
		time.Sleep(10 * time.Second)
		for _, h := range []*Holder{a, b} {
			if st, _ := h.Lock("orders"); st.State != sidecarclient.StateIdle || !strings.Contains(st.Reason, "not queueing: superseded") {
				t.Errorf("%s while superseded: %+v, want idle, not queueing", h.opts.Pod.Name, st)
			}
		}
		snap, err := lock.Inspect(context.Background(), mem.Client(9, memstore.Faults{}), b.opts.StoreLockID("orders"))
		if err != nil || len(snap.Queue) != 0 {
			t.Fatalf("queue while a and b are superseded: %+v, %v; want empty", snap.Queue, err)
		}

		// A rollback: b is not superseded any more and queues again behind c.
		bMark.Store("")
		time.Sleep(3 * time.Second)
		if st, _ := b.Lock("orders"); st.State != sidecarclient.StateWaiting {
			t.Fatalf("b after its mark was removed: %+v, want waiting", st)
		}
		cancel()
		for _, h := range holders {
			_ = h.Shutdown(context.Background())
		}
	})
}

// TestSupersededTryMode: a Try-mode acquisition waiting in the queue ends with ErrSuperseded when
// the pod is marked, and later ones are refused at once until the mark is gone.
func TestSupersededTryMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, withNewestRevision(testOptions(t, "a", batonv1.ModeTry, "orders")))
		b, _ := newTestHolder(t, mem, 2, withNewestRevision(testOptions(t, "b", batonv1.ModeTry, "orders")))
		a.Start(ctx)
		b.Start(ctx)
		a.PodReading(PodReading{AppReady: true, At: time.Now()})
		b.PodReading(PodReading{AppReady: true, At: time.Now()})
		if _, err := a.Acquire(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := b.Acquire(ctx, "orders", time.Minute)
			got <- err
		}()
		time.Sleep(2 * time.Second)
		b.PodReading(PodReading{AppReady: true, Superseded: "revision 1 superseded", At: time.Now()})
		if err := <-got; !errors.Is(err, sidecarclient.ErrSuperseded) {
			t.Fatalf("b's waiting acquire once superseded: %v, want ErrSuperseded", err)
		}
		if _, err := b.Acquire(ctx, "orders", time.Minute); !errors.Is(err, sidecarclient.ErrSuperseded) {
			t.Fatalf("b's acquire while superseded: %v, want ErrSuperseded at once", err)
		}
		b.PodReading(PodReading{AppReady: true, At: time.Now()})
		if _, err := a.Release(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		if st, err := b.Acquire(ctx, "orders", 0); err != nil || st.State != sidecarclient.StateHeld {
			t.Fatalf("b's acquire once the mark is gone: %+v, %v", st, err)
		}
		_ = a.Shutdown(ctx)
		_ = b.Shutdown(ctx)
	})
}
