package controllers_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecar"
	"github.com/baton-dev/baton/sidecarclient"
)

// stallable is an http.RoundTripper that holds every request while stalled, until the stall ends
// or the request's context does: an API server that answers one sidecar late.
type stallable struct {
	next     http.RoundTripper
	answered atomic.Int64 // requests answered
	mu       sync.Mutex
	gate     chan struct{} // nil: not stalled; closed when the stall ends
}

func (s *stallable) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	resp, err := s.next.RoundTrip(req)
	if err == nil {
		s.answered.Add(1)
	}
	return resp, err
}

func (s *stallable) stall(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case on && s.gate == nil:
		s.gate = make(chan struct{})
	case !on && s.gate != nil:
		close(s.gate)
		s.gate = nil
	}
}

// testSidecar is a pod's sidecar as it runs in the pod: its Holder (Try mode, handoff
// NewestRevision) on the in-memory lock store, and its PodWatch reading the pod from the real API
// server through a connection the test can stall.
type testSidecar struct {
	pod    *corev1.Pod
	holder *sidecar.Holder
	api    *stallable
	events <-chan sidecarclient.Event
}

func startSidecar(t *testing.T, ctx context.Context, mem *memstore.Store, seed uint64, pod *corev1.Pod) *testSidecar {
	t.Helper()
	opts, err := sidecar.ParseOptions([]string{
		"--locks=leader", "--mode=Try", "--lease=3s", "--handoff=NewestRevision", "--traffic-policy=None",
		"--cassandra-hosts=127.0.0.1", "--pod-namespace=" + pod.Namespace, "--pod-name=" + pod.Name, "--pod-uid=" + string(pod.UID),
	}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	h, err := sidecar.NewHolder(opts, mem.Client(seed, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond}), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s := &testSidecar{pod: pod, holder: h}
	cfg := rest.CopyConfig(kube.Config(t))
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		s.api = &stallable{next: rt}
		return s.api
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	events, stop := h.Subscribe()
	s.events = events
	runCtx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		sidecar.NewPodWatch(cs, opts, h, logr.Discard()).Run(runCtx)
	}()
	h.Start(runCtx)
	t.Cleanup(func() {
		s.api.stall(false)
		cancel()
		<-watched
		_ = h.Shutdown(context.Background())
		stop()
	})
	return s
}

// app asks s's sidecar for the lock as a Try-mode app does, waiting up to a minute; cancel ends
// its wait (the app gives up, to ask again later). The outcome arrives on the channel.
func (s *testSidecar) app(ctx context.Context) (<-chan error, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.holder.Acquire(ctx, "leader", time.Minute)
		done <- err
	}()
	return done, cancel
}

// grants returns the tokens s was granted, from its events so far.
func (s *testSidecar) grants() []int64 {
	var tokens []int64
	for {
		select {
		case e := <-s.events:
			if e.Type == sidecarclient.EventAcquired {
				tokens = append(tokens, e.Token)
			}
		default:
			return tokens
		}
	}
}

// TestHandoffWaitsForOldPodsToStepAside (real kube-apiserver; the lock on the in-memory store;
// the sidecars' own Holder and PodWatch): the operator marks the old holder only once every old pod
// that does not hold has stepped aside, however late its sidecar reads its mark, so that the
// lock moves once, to the new pod, even when the old pod's Try-mode app asks again between two
// waits. The old waiter's API connection stalls from before its mark until after the old holder
// could have been marked with a timer (2s); the old holder's stalls too until both apps asked
// again, so that its release comes when the old waiter is first in the queue.
func TestHandoffWaitsForOldPodsToStepAside(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dl, oldHolder, oldWaiter, newer := createRollout(ctx, t, c, ns)
	mem := memstore.New()
	store := mem.Client(9, memstore.Faults{})
	lockID := sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, "leader")
	h, w, n := startSidecar(t, ctx, mem, 1, &oldHolder), startSidecar(t, ctx, mem, 2, &oldWaiter), startSidecar(t, ctx, mem, 3, &newer)
	queue := func(what string, want ...*testSidecar) {
		t.Helper()
		testenv.WaitFor(t, what, 30*time.Second, func() bool {
			s, err := lock.Inspect(ctx, store, lockID)
			if err != nil || len(s.Queue) != len(want) {
				return false
			}
			for i, e := range s.Queue {
				if _, name := sidecarcontract.PodOfOwner(e.Owner); name != want[i].pod.Name {
					return false
				}
			}
			return true
		})
	}

	// The old holder holds; the old waiter, then the new pod, wait.
	hDone, _ := h.app(ctx)
	if err := <-hDone; err != nil {
		t.Fatalf("old holder's acquire: %v", err)
	}
	first := h.grants()
	wDone, wGivesUp := w.app(ctx)
	queue("the old waiter queued", w)
	nDone, nGivesUp := n.app(ctx)
	queue("the old waiter and the new pod queued", w, n)

	r := &controllers.DistributedLockReconciler{Client: c, Recorder: &events{}, Interval: time.Hour, Stores: source{store}}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatal(err)
		}
	}
	markOf := func(pod *corev1.Pod) string { return supersededMark(ctx, t, c, pod) }

	// The old waiter's sidecar, and the old holder's, stop hearing from the API server; the
	// operator marks the old waiter.
	w.api.stall(true)
	h.api.stall(true)
	testenv.WaitFor(t, "the old waiter marked", 30*time.Second, func() bool { reconcile(); return markOf(&oldWaiter) != "" })
	// Its app's wait ends: it is out of the queue, though its sidecar has not read its mark.
	wGivesUp()
	if err := <-wDone; err == nil {
		t.Fatal("the old waiter's acquire was granted")
	}
	queue("the old waiter out of the queue", n)
	// The operator must not mark the old holder while the old waiter's sidecar has not stepped
	// aside: a timer is not enough. Watch it for longer than two readings of a sidecar (2s).
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		reconcile()
		if m := markOf(&oldHolder); m != "" {
			t.Errorf("the old holder was marked while the old waiter's sidecar had not read its mark (its API connection stalled): %q", m)
			break
		}
	}
	// Both apps ask again between two waits, the old one first: its sidecar, which still has not
	// read its mark, queues it ahead of the new pod.
	nGivesUp()
	<-nDone
	wDone, _ = w.app(ctx)
	queue("the old waiter queued again", w)
	nDone, _ = n.app(ctx)
	queue("the old waiter and the new pod queued again", w, n)
	// The old holder's sidecar reads its pod again (twice: the first reading was surely acted on),
	// unless the lock moved before; then the old waiter's.
	holders := watchHolders(ctx, store, lockID)
	answered := h.api.answered.Load()
	h.api.stall(false)
	testenv.WaitFor(t, "the old holder's sidecar read its pod twice, or the lock moved", 30*time.Second, func() bool {
		return h.api.answered.Load() >= answered+2 || len(holders.names()) > 1
	})
	w.api.stall(false)
	testenv.WaitFor(t, "the lock granted to a pod of the new revision", 30*time.Second, func() bool {
		reconcile()
		names := holders.names()
		return names[len(names)-1] == newer.Name
	})
	if err := <-nDone; err != nil {
		t.Errorf("the new pod's acquire: %v", err)
	}
	if got, want := holders.names(), []string{oldHolder.Name, newer.Name}; !slices.Equal(got, want) {
		t.Errorf("holders %v; want %v: one move, to the new pod", got, want)
	}
	if got := w.grants(); len(got) != 0 {
		t.Errorf("the old waiter was granted the lock (tokens %v) after the old holder (token %v); want only the new pod", got, first)
	}
	select {
	case err := <-wDone:
		if !errors.Is(err, sidecarclient.ErrSuperseded) {
			t.Errorf("the old waiter's second acquire: %v, want ErrSuperseded", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the old waiter's second acquire did not end once its sidecar read its mark")
	}
	if got := n.grants(); len(got) != 1 {
		t.Errorf("the new pod was granted %d times (tokens %v), want once", len(got), got)
	}
	if got := h.grants(); len(got) != 0 {
		t.Errorf("the old holder was granted again: tokens %v", got)
	}
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(&oldWaiter), &p); err != nil {
		t.Fatal(err)
	}
	if got := steppedAsideFor(&p); got != p.Annotations[batonv1.AnnotationSuperseded] {
		t.Errorf("the old waiter's condition %s says %q, want its mark %q", batonv1.ConditionSteppedAside, got, p.Annotations[batonv1.AnnotationSuperseded])
	}
	if strings.Contains(markOf(&newer), "superseded") {
		t.Error("the new pod is marked")
	}
}

// holderWatch reads a lock every 10ms and keeps the pods that held it, in order.
type holderWatch struct {
	mu      sync.Mutex
	holders []string
}

func watchHolders(ctx context.Context, store lock.Store, lockID string) *holderWatch {
	hw := &holderWatch{}
	go func() {
		for ctx.Err() == nil {
			if s, err := lock.Inspect(ctx, store, lockID); err == nil && s.Record.Held() {
				_, name := sidecarcontract.PodOfOwner(s.Record.Owner)
				hw.mu.Lock()
				if len(hw.holders) == 0 || hw.holders[len(hw.holders)-1] != name {
					hw.holders = append(hw.holders, name)
				}
				hw.mu.Unlock()
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return hw
}

// names returns the pods that held the lock so far, in order; never empty once the first read
// came back (it waits for it).
func (hw *holderWatch) names() []string {
	for {
		hw.mu.Lock()
		names := slices.Clone(hw.holders)
		hw.mu.Unlock()
		if len(names) > 0 {
			return names
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// steppedAsideFor is the message of p's condition baton.dev/stepped-aside when True.
func steppedAsideFor(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == batonv1.ConditionSteppedAside && c.Status == corev1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}
