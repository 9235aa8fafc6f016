package operator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/operator"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestClientLimitsFlags: the operator's API client gets its own client-side rate limit
// (--kube-api-qps, --kube-api-burst; 50 and 100 by default) on a configuration loaded from a
// kubeconfig, which has none (client-go would then allow 5 requests per second), and bad values
// are refused naming the flag. A unit test: nothing is started.
func TestClientLimitsFlags(t *testing.T) {
	env := func(string) string { return "baton-system" }
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		qps   float32
		burst int
	}{
		{nil, 50, 100},
		{[]string{"--kube-api-qps=200", "--kube-api-burst=400"}, 200, 400},
		{[]string{"--kube-api-qps=0.5", "--kube-api-burst=1"}, 0.5, 1},
	} {
		o, err := operator.ParseOptions(append([]string{"--sidecar-image=baton:dev", "--kubeconfig=" + kubeconfig}, tc.args...), env)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		cfg, err := operator.RESTConfig(o)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.QPS != tc.qps || cfg.Burst != tc.burst {
			t.Errorf("%q: RESTConfig has QPS %v, burst %d; want %v, %d", tc.args, cfg.QPS, cfg.Burst, tc.qps, tc.burst)
		}
		given := &rest.Config{Host: "https://example.com", QPS: 1000, Burst: 2000}
		got := operator.WithClientLimits(o, given)
		if got.QPS != tc.qps || got.Burst != tc.burst || given.QPS != 1000 || given.Burst != 2000 {
			t.Errorf("%q: WithClientLimits gave QPS %v, burst %d (its argument now %v, %d); want %v, %d and the argument unchanged",
				tc.args, got.QPS, got.Burst, given.QPS, given.Burst, tc.qps, tc.burst)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps=0: use 0.1 to 10000"},
		{[]string{"--kube-api-qps=-1"}, "--kube-api-qps=-1: use 0.1 to 10000"},
		{[]string{"--kube-api-burst=0"}, "--kube-api-burst=0: use 1 to 100000"},
		{[]string{"--kube-api-qps=100", "--kube-api-burst=50"}, "--kube-api-burst=50 is below --kube-api-qps=100"},
		{[]string{"--kube-api-qps=fast"}, "kube-api-qps"},
	} {
		_, err := operator.ParseOptions(append([]string{"--sidecar-image=baton:dev"}, tc.args...), env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v; want one containing %q", tc.args, err, tc.want)
		}
	}
}

// manyLocks and manyLocksWithin are TestManyNewLocksReconciledPromptly's burst and its bound: each
// new lock's first reconcile writes its status once, so at client-go's default limit (5 requests
// per second beyond a burst of 10) manyLocks status writes alone take (60-10)/5 = 10 s; at the
// operator's default (50, burst 100) they go at once, and the bound leaves the reconciles' store
// reads and a loaded machine room.
const (
	manyLocks       = 60
	manyLocksWithin = 5 * time.Second
)

// TestManyNewLocksReconciledPromptly: manyLocks DistributedLocks created at once all have a status
// for their generation within manyLocksWithin, on the real API server, with the operator's API
// client at its default client-side limit (devcluster gives it no limit of its own, as a kubeconfig
// gives none). The scale run found 1,000 locks taking 3 min 15 s at client-go's 5 per second.
func TestManyNewLocksReconciledPromptly(t *testing.T) {
	env := up(t)
	ns := newNamespace(t, env, "many")
	t.Cleanup(func() {
		// The shared operator refreshes every lock each second (--status-interval=1s): leave
		// none of these behind for the tests that follow.
		err := env.Client.DeleteAllOf(context.Background(), &batonv1.DistributedLock{}, client.InNamespace(ns))
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the locks of %s: %v", ns, err)
		}
	})
	start := time.Now()
	for i := range manyLocks {
		create(t, env, newLock(ns, fmt.Sprintf("many-%d", i)))
	}
	created := time.Since(start)
	var pending int
	testenv.WaitFor(t, fmt.Sprintf("%d new DistributedLocks to have a status", manyLocks), time.Minute, func() bool {
		var l batonv1.DistributedLockList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
			return false
		}
		pending = manyLocks - len(l.Items)
		for _, dl := range l.Items {
			if dl.Generation == 0 || dl.Status.ObservedGeneration != dl.Generation {
				pending++
			}
		}
		return pending == 0
	})
	took := time.Since(start)
	t.Logf("%d DistributedLocks created in %v, all with a status %v after the first was created", manyLocks,
		created.Round(time.Millisecond), took.Round(time.Millisecond))
	if took > manyLocksWithin {
		t.Errorf("%d new DistributedLocks took %v to all have a status; want at most %v (client-go's default 5 requests per second would need 10 s)",
			manyLocks, took.Round(time.Millisecond), manyLocksWithin)
	}
}
