package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// gatedStore is a lock store whose calls, while held, wait until the hold ends, whatever their
// context says: a request already on its way, such as a grant in flight.
type gatedStore struct {
	lock.Store
	mu      sync.Mutex
	gate    chan struct{}
	blocked int // calls waiting at the gate
}

func (g *gatedStore) wait() {
	g.mu.Lock()
	gate := g.gate
	if gate != nil {
		g.blocked++
	}
	g.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (g *gatedStore) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.blocked = make(chan struct{}), 0
}

func (g *gatedStore) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gate)
	g.gate = nil
}

func (g *gatedStore) waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked
}

func (g *gatedStore) Load(ctx context.Context, lockID string, linearizable bool) (lock.Record, bool, error) {
	g.wait()
	return g.Store.Load(ctx, lockID, linearizable)
}

func (g *gatedStore) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	g.wait()
	return g.Store.CompareAndSwap(ctx, lockID, prev, next)
}

func (g *gatedStore) Queue(ctx context.Context, lockID string, from int64, limit int) ([]lock.QueueEntry, error) {
	g.wait()
	return g.Store.Queue(ctx, lockID, from, limit)
}

// TestSteppedAsideWaitsForAcquisitionsInFlight (Try mode, virtual time): b waits for the lock a
// holds; its store calls then hang (a request on its way). Once b reads its superseded mark it
// refuses new acquisitions at once, but says it stepped aside only once the waiting acquisition,
// cancelled, has returned: not while its store call hangs. It never says so for another mark, nor
// after a reading without the mark.
func TestSteppedAsideWaitsForAcquisitionsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, withNewestRevision(testOptions(t, "a", batonv1.ModeTry, "orders")))
		store := &gatedStore{Store: mem.Client(2, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond})}
		b, err := NewHolder(withNewestRevision(testOptions(t, "b", batonv1.ModeTry, "orders")), store, logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []*Holder{a, b} {
			h.Start(ctx)
			h.PodReading(PodReading{AppReady: true, At: time.Now()})
		}
		if _, err := a.Acquire(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := b.Acquire(ctx, "orders", time.Minute)
			got <- err
		}()
		time.Sleep(2 * time.Second) // b queued
		store.hold()
		for store.waiting() == 0 {
			time.Sleep(10 * time.Millisecond) // b's next poll reaches the store
		}
		const mark = "revision 1 superseded"
		b.PodReading(PodReading{AppReady: true, Superseded: mark, At: time.Now()})
		if _, err := b.Acquire(ctx, "orders", 0); !errors.Is(err, sidecarclient.ErrSuperseded) {
			t.Fatalf("b's acquire once superseded: %v, want ErrSuperseded at once", err)
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if b.SteppedAside(sctx, mark) {
			t.Error("b said it stepped aside while its acquisition was in flight (its store call hung)")
		}
		store.release()
		if err := <-got; !errors.Is(err, sidecarclient.ErrSuperseded) {
			t.Fatalf("b's waiting acquire once superseded: %v, want ErrSuperseded", err)
		}
		if !b.SteppedAside(ctx, mark) {
			t.Fatal("b did not step aside once its acquisition returned")
		}
		if b.SteppedAside(ctx, "revision 0 superseded") {
			t.Error("b stepped aside for a mark it has not read")
		}
		b.PodReading(PodReading{AppReady: true, At: time.Now()})
		if b.SteppedAside(ctx, mark) {
			t.Error("b says it stepped aside after a reading without its mark")
		}
		_ = a.Shutdown(ctx)
		_ = b.Shutdown(ctx)
	})
}

// TestNewestRevisionTakesNothingBeforeItsFirstReading (virtual time): with handoff NewestRevision
// a sidecar (as after a restart) does not know whether its pod is superseded, nor whether it stepped
// aside before: it takes nothing before its first reading of the pod. A Try-mode acquire waits for
// that reading (up to 5s, then it is refused); a Blocking-mode sidecar stays out of the queue.
func TestNewestRevisionTakesNothingBeforeItsFirstReading(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, _ := newTestHolder(t, mem, 1, withNewestRevision(testOptions(t, "a", batonv1.ModeTry, "orders")))
		a.Start(ctx)
		start := time.Now()
		_, err := a.Acquire(ctx, "orders", 0)
		if !errors.Is(err, sidecarclient.ErrSuperseded) || !strings.Contains(err.Error(), "not been read yet") {
			t.Fatalf("acquire before any reading: %v, want ErrSuperseded, not read yet", err)
		}
		if waited := time.Since(start); waited != firstReadingWait {
			t.Errorf("acquire before any reading was refused after %v, want %v", waited, firstReadingWait)
		}
		got := make(chan error, 1)
		go func() {
			_, err := a.Acquire(ctx, "orders", 0)
			got <- err
		}()
		time.Sleep(time.Second)
		a.PodReading(PodReading{AppReady: true, At: time.Now()})
		if err := <-got; err != nil {
			t.Fatalf("acquire once the pod was read: %v", err)
		}
		// A first reading that shows the pod superseded refuses at once.
		c, _ := newTestHolder(t, mem, 3, withNewestRevision(testOptions(t, "c", batonv1.ModeTry, "orders")))
		c.Start(ctx)
		go func() {
			time.Sleep(time.Second)
			c.PodReading(PodReading{AppReady: true, Superseded: "revision 1 superseded", At: time.Now()})
		}()
		start = time.Now()
		if _, err := c.Acquire(ctx, "orders", 0); !errors.Is(err, sidecarclient.ErrSuperseded) || !strings.Contains(err.Error(), "revision 1 superseded") {
			t.Errorf("acquire whose first reading shows the pod superseded: %v, want ErrSuperseded", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("acquire whose first reading shows the pod superseded was answered after %v, want at that reading (1s)", waited)
		}
		_ = c.Shutdown(ctx)

		b, _ := newTestHolder(t, mem, 2, withNewestRevision(testOptions(t, "b", batonv1.ModeBlocking, "orders")))
		b.Start(ctx)
		time.Sleep(3 * time.Second)
		if st, _ := b.Lock("orders"); st.State != sidecarclient.StateIdle || !strings.Contains(st.Reason, "not been read yet") {
			t.Errorf("blocking sidecar before any reading: %+v, want idle, not read yet", st)
		}
		if s, err := lock.Inspect(ctx, mem.Client(9, memstore.Faults{}), b.opts.StoreLockID("orders")); err != nil || len(s.Queue) != 0 {
			t.Errorf("queue before the blocking sidecar read its pod: %+v, %v; want empty", s.Queue, err)
		}
		b.PodReading(PodReading{AppReady: true, At: time.Now()})
		time.Sleep(3 * time.Second)
		if st, _ := b.Lock("orders"); st.State != sidecarclient.StateWaiting {
			t.Errorf("blocking sidecar once it read its pod: %+v, want waiting", st)
		}
		_ = a.Shutdown(ctx)
		_ = b.Shutdown(ctx)
	})
}

// stepAsideRecorder is a PodReader that records readings and, at each, the pod's stepped-aside
// condition as the API server has it then; it steps aside when told to.
type stepAsideRecorder struct {
	cs       *fake.Clientset
	ns, name string
	steps    bool
	readings []PodReading
	then     []string // SteppedAsideFor the pod at each reading
	asked    []string // marks SteppedAside was asked about
}

func (r *stepAsideRecorder) PodReading(p PodReading) {
	pod, err := r.cs.CoreV1().Pods(r.ns).Get(context.Background(), r.name, metav1.GetOptions{})
	if err != nil {
		panic(err)
	}
	r.readings, r.then = append(r.readings, p), append(r.then, SteppedAsideFor(pod))
}

func (r *stepAsideRecorder) SteppedAside(_ context.Context, mark string) bool {
	r.asked = append(r.asked, mark)
	return r.steps
}

// TestPodWatchAnswersTheMark (in-memory fake clientset): with handoff NewestRevision the PodWatch
// sets the condition baton.dev/stepped-aside True with the mark once the Holder stepped aside,
// once; when the mark is gone it sets it False before the Holder hears of that reading, with a
// patch conditioned on the resourceVersion it read (a conflict: it reads again); when that write
// keeps failing the reading is not reported, and the Holder keeps away.
func TestPodWatchAnswersTheMark(t *testing.T) {
	o := withNewestRevision(testOptions(t, "a", batonv1.ModeTry, "orders"))
	const mark = "revision 1 of Deployment/web superseded"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Pod.Namespace, Name: o.Pod.Name, UID: types.UID(o.Pod.UID), ResourceVersion: "7",
			Annotations: map[string]string{batonv1.AnnotationSuperseded: mark}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}}},
	}
	cs := fake.NewClientset(pod)
	var conflicts int          // conditional patches still to refuse
	var preconditions []string // resourceVersions the conditional patches named
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &body); err != nil || body.Metadata.ResourceVersion == "" {
			return false, nil, nil
		}
		preconditions = append(preconditions, body.Metadata.ResourceVersion)
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, pod.Name, errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	rec := &stepAsideRecorder{cs: cs, ns: pod.Namespace, name: pod.Name}
	w := NewPodWatch(cs, o, rec, logr.Discard())
	ctx := context.Background()
	current := func() *corev1.Pod {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Marked: the Holder has not stepped aside yet, then it has.
	w.readOnce(ctx)
	if got := SteppedAsideFor(current()); got != "" || len(rec.asked) != 1 || rec.asked[0] != mark {
		t.Fatalf("before the Holder stepped aside: condition %q, asked %q; want none, asked about the mark", got, rec.asked)
	}
	rec.steps = true
	w.readOnce(ctx)
	if got := SteppedAsideFor(current()); got != mark {
		t.Fatalf("once the Holder stepped aside: condition says %q, want %q", got, mark)
	}
	w.readOnce(ctx)
	if len(rec.asked) != 2 {
		t.Errorf("asked %d times, want twice (not again once the pod says so)", len(rec.asked))
	}

	// The mark goes: the condition goes False first, conditioned on the pod as read; one
	// conflict makes it read the pod again.
	unmarked := current()
	delete(unmarked.Annotations, batonv1.AnnotationSuperseded)
	unmarked.ResourceVersion = "9"
	if _, err := cs.CoreV1().Pods(pod.Namespace).Update(ctx, unmarked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conflicts = 1
	n := len(rec.readings)
	w.readOnce(ctx)
	if len(rec.readings) != n+1 || rec.readings[n].Superseded != "" || rec.then[n] != "" {
		t.Fatalf("reading without the mark: reported %d (superseded %q), condition then %q; want reported after the condition went",
			len(rec.readings)-n, rec.readings[len(rec.readings)-1].Superseded, rec.then[len(rec.then)-1])
	}
	if len(preconditions) != 2 || preconditions[0] != "9" || preconditions[1] != "9" {
		t.Errorf("conditional writes named resourceVersions %v, want [9 9] (the pod as read, twice after a conflict)", preconditions)
	}
	if st := conditionStatus(current()); st != corev1.ConditionFalse {
		t.Errorf("condition %s after the mark went: %q, want False", batonv1.ConditionSteppedAside, st)
	}

	// A stale True that cannot be withdrawn: the reading is not reported.
	stale := current()
	stale.Status.Conditions = []corev1.PodCondition{{Type: batonv1.ConditionSteppedAside, Status: corev1.ConditionTrue, Message: mark}}
	if _, err := cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conflicts = staleReadTries
	n = len(rec.readings)
	w.readOnce(ctx)
	if len(rec.readings) != n {
		t.Errorf("a reading whose stale condition could not be withdrawn was reported: %+v", rec.readings[n:])
	}
}

func conditionStatus(pod *corev1.Pod) corev1.ConditionStatus {
	for _, c := range pod.Status.Conditions {
		if c.Type == batonv1.ConditionSteppedAside {
			return c.Status
		}
	}
	return ""
}
