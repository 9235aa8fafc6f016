package operator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/operator"
	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// The budgets of TestOperatorCostFollowsChange (issue 26, items 2 and 4).
const (
	// maxStoreReadsPerLockPerMinute bounds the operator's lock store reads of an idle lock.
	maxStoreReadsPerLockPerMinute = 1
	// maxStatusLag bounds the time from the sidecar's report of a new grant on its pod to the
	// DistributedLock's status naming the new holder.
	maxStatusLag = 2 * time.Second
)

// TestOperatorCostFollowsChange (issue 26, item 2): the operator's cost follows what changed, not
// a timer per lock. On a control plane of its own (kubeB), with the operator at its default
// settings as the chart runs it and real sidecars for the pods on the real Cassandra:
//
//   - At rest (four locks, each held by one pod with one more waiting, no pod changing), over a
//     10 s window: no status write (counted on a watch of the DistributedLocks, where every write
//     makes a new resourceVersion) and no status request at all (the API server's own
//     apiserver_request_total: a write that changes nothing makes no resourceVersion, but is a
//     request), no Event, and at most
//     maxStoreReadsPerLockPerMinute store reads per lock per minute (counted by the operator's own
//     counting wrapper of its store, baton_distributedlock_store_requests_total).
//   - A hand-off (the holder's sidecar stops, the waiter takes the lock) shows in status within
//     maxStatusLag of the new holder's sidecar reporting it on its pod: the condition
//     baton.dev/lock-held under ReadinessGate (a bare pod's default), the label baton.dev/role
//     under Label. Both as the test's own watches see them.
func TestOperatorCostFollowsChange(t *testing.T) {
	up(t) // builds the sidecar binary; cluster A's operator is left alone
	began := time.Now()
	defer func() {
		t.Logf("%v from the start of the second operator to the end", time.Since(began).Round(100*time.Millisecond))
	}()
	env := startDefaultCluster(t)
	ns := newNamespace(t, env, "atrest")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const locks = 4
	names := make([]string, locks)
	for i := range names {
		names[i] = fmt.Sprintf("idle-%d", i)
		create(t, env, newLock(ns, names[i], func(d *batonv1.DistributedLock) {
			if i%2 == 1 {
				d.Spec.TrafficPolicy = batonv1.TrafficLabel
			}
		}))
		create(t, env, appPod(ns, names[i]+"-a", names[i]))
		create(t, env, appPod(ns, names[i]+"-b", names[i]))
	}
	for _, name := range names {
		waitLock(t, env, ns, name, name+" held, with one waiter", func(s batonv1.LockStatus) bool { return s.Holder != "" && s.Waiting == 1 })
	}
	pods := watchPods(ctx, t, env, ns)
	// Past the operator's last follow-up read after a pod change (see controllers.podEvents).
	quiet := 5*controllers.DefaultPodSettle + time.Second
	testenv.WaitFor(t, fmt.Sprintf("no pod of %s to change for %v", ns, quiet), time.Minute, func() bool { return pods.since() >= quiet })

	// At rest.
	const window = 10 * time.Second
	wc := watchClient(t)
	readsBefore := storeReads(ctx, t, env, ns)
	dls := startWatch(ctx, t, func(o metav1.ListOptions) (watch.Interface, error) {
		return wc.Watch(ctx, &batonv1.DistributedLockList{}, client.InNamespace(ns), &client.ListOptions{Raw: &o})
	}, func() (string, error) {
		var l batonv1.DistributedLockList
		err := wc.List(ctx, &l, client.InNamespace(ns))
		return l.ResourceVersion, err
	})
	events := startWatch(ctx, t, func(o metav1.ListOptions) (watch.Interface, error) {
		return env.Kube.EventsV1().Events(ns).Watch(ctx, o)
	}, func() (string, error) {
		l, err := env.Kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	})
	kc := kubeB.Client(t)
	statusBefore, eventsBefore := apiWrites(ctx, t, kc)
	writes, evs := count(ctx, t, window, dls, events)
	reads := storeReads(ctx, t, env, ns) - readsBefore
	statusAfter, eventsAfter := apiWrites(ctx, t, kc)
	statusRequests, eventRequests := statusAfter-statusBefore, eventsAfter-eventsBefore
	perLockMinute := reads / locks / window.Minutes()
	t.Logf("at rest, %d locks over %v: %d status writes (%.0f status requests), %d Events (%.0f Event requests), %.0f store reads (%.2f per lock per minute, %.4f per lock per second)",
		locks, window, writes, statusRequests, evs, eventRequests, reads, perLockMinute, perLockMinute/60)
	if writes != 0 || evs != 0 || statusRequests != 0 || eventRequests != 0 {
		t.Errorf("at rest: %d status writes (%.0f requests) and %d Events (%.0f requests) in %v, want none", writes, statusRequests, evs, eventRequests, window)
	}
	if perLockMinute > maxStoreReadsPerLockPerMinute {
		t.Errorf("at rest: %.0f store reads of %d locks in %v, %.2f per lock per minute; want at most %d",
			reads, locks, window, perLockMinute, maxStoreReadsPerLockPerMinute)
	}

	// A hand-off under each traffic policy.
	for _, name := range names[:2] {
		handOffShowsPromptly(ctx, t, env, wc, ns, name)
	}
}

// handOffShowsPromptly stops the sidecar of the holder of lock ns/name and checks that status names
// the other pod within maxStatusLag of its sidecar reporting the grant on its pod.
func handOffShowsPromptly(ctx context.Context, t *testing.T, env *devcluster.Cluster, wc client.WithWatch, ns, name string) {
	t.Helper()
	dl := &batonv1.DistributedLock{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dl); err != nil {
		t.Fatal(err)
	}
	holder := dl.Status.Locks[0].Holder
	next := name + "-a"
	if holder == next {
		next = name + "-b"
	}
	reported := func(p *corev1.Pod) bool {
		if dl.Spec.TrafficPolicy == batonv1.TrafficLabel {
			return p.Labels[batonv1.LabelRole] == batonv1.RoleHolder
		}
		for _, c := range p.Status.Conditions {
			if c.Type == batonv1.ConditionLockHeld && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	}
	pods := startWatch(ctx, t, func(o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + next
		return env.Kube.CoreV1().Pods(ns).Watch(ctx, o)
	}, func() (string, error) {
		l, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + next})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	})
	dls := startWatch(ctx, t, func(o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = "metadata.name=" + name
		return wc.Watch(ctx, &batonv1.DistributedLockList{}, client.InNamespace(ns), &client.ListOptions{Raw: &o})
	}, func() (string, error) {
		var l batonv1.DistributedLockList
		err := wc.List(ctx, &l, client.InNamespace(ns))
		return l.ResourceVersion, err
	})
	stopped := time.Now()
	if err := sidecarOf(t, env, ns, holder).Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var podAt, statusAt time.Time
	deadline := time.After(30 * time.Second)
	for podAt.IsZero() || statusAt.IsZero() {
		select {
		case e, ok := <-pods.ResultChan():
			if !ok {
				t.Fatal("the watch of pod " + next + " ended")
			}
			if p, isPod := e.Object.(*corev1.Pod); isPod && podAt.IsZero() && reported(p) {
				podAt = time.Now()
			}
		case e, ok := <-dls.ResultChan():
			if !ok {
				t.Fatal("the watch of DistributedLock " + name + " ended")
			}
			if d, isLock := e.Object.(*batonv1.DistributedLock); isLock && statusAt.IsZero() && len(d.Status.Locks) > 0 && d.Status.Locks[0].Holder == next {
				statusAt = time.Now()
			}
		case <-deadline:
			t.Fatalf("%s (%s): 30 s after %s's sidecar stopped, %s's pod reported the grant at %v and status named it at %v (zero: not yet)",
				name, trafficOf(dl), holder, next, podAt, statusAt)
		}
	}
	lag := statusAt.Sub(podAt)
	t.Logf("%s (%s): %s's sidecar stopped; %s's pod reported the grant %v later, status named it %v after that",
		name, trafficOf(dl), holder, next, podAt.Sub(stopped).Round(time.Millisecond), lag.Round(time.Millisecond))
	if lag > maxStatusLag {
		t.Errorf("%s (%s): status named the new holder %v after its pod reported the grant, want at most %v", name, trafficOf(dl), lag, maxStatusLag)
	}
	waitEvent(t, env, ns, name, controllers.ReasonHolderChanged, fmt.Sprintf("-> %s/%s", ns, next))
}

func trafficOf(dl *batonv1.DistributedLock) string {
	if dl.Spec.TrafficPolicy == "" {
		return "trafficPolicy unset: ReadinessGate"
	}
	return "trafficPolicy " + string(dl.Spec.TrafficPolicy)
}

// startDefaultCluster runs the operator, with its default settings (no --status-interval), and a
// node agent on kubeB, on cluster A's Cassandra keyspace; stopped when t ends. kubeB is shared with
// TestGlobalLockAcrossTwoClusters, which starts its own operator there: the webhook configuration
// each leaves behind names its own (stopped) webhook, so it is removed before and after.
func startDefaultCluster(t *testing.T) *devcluster.Cluster {
	t.Helper()
	cfg := kubeB.Config(t)
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	removeWebhookConfiguration := func() {
		err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "baton-inject", metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("removing the webhook configuration of kubeB: %v", err)
		}
	}
	removeWebhookConfiguration()
	opts := clusterOptions(cfg, cassandra.Cluster(t).Hosts(), filepath.Join(shared.binDir, "sidecar"), "[defaults] ")
	opts.OperatorArgs = slices.DeleteFunc(opts.OperatorArgs, func(a string) bool { return strings.HasPrefix(a, "--status-interval=") })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := devcluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the operator with its defaults: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		removeWebhookConfiguration()
	})
	return c
}

// watchClient is a client of kubeB that can watch DistributedLocks.
func watchClient(t *testing.T) client.WithWatch {
	t.Helper()
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(kubeB.Config(t), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startWatch lists (list returns the list's resourceVersion) and watches from there, so that the
// watch reports every change after the list and none before; stopped when t ends.
func startWatch(ctx context.Context, t *testing.T, start func(metav1.ListOptions) (watch.Interface, error), list func() (string, error)) watch.Interface {
	t.Helper()
	rv, err := list()
	if err != nil {
		t.Fatal(err)
	}
	w, err := start(metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// count counts the changes the watches dls and events report for window: writes of
// DistributedLocks and Events added or changed.
func count(ctx context.Context, t *testing.T, window time.Duration, dls, events watch.Interface) (writes, evs int) {
	t.Helper()
	end := time.After(window)
	for {
		select {
		case e, ok := <-dls.ResultChan():
			if !ok {
				t.Fatal("the watch of the DistributedLocks ended within the window")
			}
			if e.Type == watch.Modified || e.Type == watch.Added {
				writes++
			}
		case e, ok := <-events.ResultChan():
			if !ok {
				t.Fatal("the watch of the Events ended within the window")
			}
			if e.Type == watch.Modified || e.Type == watch.Added {
				evs++
			}
		case <-end:
			return writes, evs
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// podChanges records when a pod of a namespace last changed.
type podChanges struct {
	mu   sync.Mutex
	last time.Time
}

func (p *podChanges) since() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(p.last)
}

// watchPods watches the pods of ns from now until ctx ends.
func watchPods(ctx context.Context, t *testing.T, env *devcluster.Cluster, ns string) *podChanges {
	t.Helper()
	w := startWatch(ctx, t, func(o metav1.ListOptions) (watch.Interface, error) {
		return env.Kube.CoreV1().Pods(ns).Watch(ctx, o)
	}, func() (string, error) {
		l, err := env.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	})
	p := &podChanges{last: time.Now()}
	go func() {
		for range w.ResultChan() {
			p.mu.Lock()
			p.last = time.Now()
			p.mu.Unlock()
		}
	}()
	return p
}

// storeReads sums the operator's reads of the lock stores of the DistributedLocks of ns, as its
// metrics report them.
func storeReads(ctx context.Context, t *testing.T, env *devcluster.Cluster, ns string) float64 {
	t.Helper()
	body, err := env.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "baton_distributedlock_store_requests_total{") ||
			!strings.Contains(line, `kind="read"`) || !strings.Contains(line, fmt.Sprintf("namespace=%q", ns)) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// apiWrites returns the requests the API server kc answered so far that write DistributedLock
// status and Events, as its own apiserver_request_total counts them. On kubeB, only the operator
// under test writes either.
func apiWrites(ctx context.Context, t *testing.T, kc kubernetes.Interface) (status, events float64) {
	t.Helper()
	body, err := kc.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		writes := false
		for _, verb := range []string{"POST", "PUT", "PATCH", "APPLY"} {
			writes = writes || strings.Contains(line, `verb="`+verb+`"`)
		}
		if !writes {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		switch {
		case strings.Contains(line, `resource="distributedlocks"`) && strings.Contains(line, `subresource="status"`):
			status += v
		case strings.Contains(line, `resource="events"`):
			events += v
		}
	}
	return status, events
}
