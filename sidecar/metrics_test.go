package sidecar

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

func TestMetricsFollowTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		m := newMetricSet()
		cut := mem.Client(1, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond})
		h, err := newInstrumentedHolder(testOptions(t, "a", batonv1.ModeBlocking, "orders"), cut, logr.Discard(), m)
		if err != nil {
			t.Fatal(err)
		}
		events, stop := h.Subscribe()
		defer stop()
		h.Start(ctx)
		acquired := next(t, events)
		if acquired.Type != sidecarclient.EventAcquired {
			t.Fatalf("%+v", acquired)
		}
		if got := testutil.ToFloat64(m.held.WithLabelValues("orders")); got != 1 {
			t.Fatalf("baton_lock_held = %v, want 1", got)
		}
		// A float64 holds tokens exactly up to 2^53 (wall-clock microseconds until the 2250s).
		if got := testutil.ToFloat64(m.token.WithLabelValues("orders")); got != float64(acquired.Token) {
			t.Fatalf("baton_lock_token = %v, want %d", got, acquired.Token)
		}
		time.Sleep(5 * time.Second) // a few renewals
		if n := testutil.CollectAndCount(m.renewals, "baton_lock_renew_seconds"); n != 1 {
			t.Fatalf("renewal histogram has %d series, want the ok outcome of orders", n)
		}
		if n := testutil.CollectAndCount(m.requests, "baton_store_request_seconds"); n < 3 {
			t.Fatalf("store request histogram has %d series, want load, queue and cas at least", n)
		}
		cut.Partition(time.Minute)
		if e := next(t, events); e.Type != sidecarclient.EventLost {
			t.Fatalf("%+v", e)
		}
		if got := testutil.ToFloat64(m.losses.WithLabelValues("orders", "expired")); got != 1 {
			t.Fatalf("losses{reason=expired} = %v", got)
		}
		if got := testutil.ToFloat64(m.held.WithLabelValues("orders")); got != 0 {
			t.Fatalf("held after loss = %v", got)
		}
		if got := testutil.ToFloat64(m.storeErrors.WithLabelValues("cas")) + testutil.ToFloat64(m.storeErrors.WithLabelValues("serial_load")); got < 1 {
			t.Fatalf("no store error counted during the partition")
		}
		time.Sleep(2 * time.Minute) // virtual: let the lost lease's clean-up give up
		_ = h.Shutdown(ctx)
	})
}

func TestServeMetrics(t *testing.T) {
	m := newMetricSet()
	m.acquired("orders", 7)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, bad := range []string{"metrics.example:9464", "9464", "127.0.0.1:99999", ""} {
		if _, err := serveMetrics(ctx, bad, m); err == nil || !strings.Contains(err.Error(), "BATON_METRICS_ADDR") {
			t.Errorf("metrics address %q: err = %v, want a refusal naming BATON_METRICS_ADDR", bad, err)
		}
	}
	ln, err := serveMetrics(ctx, "127.0.0.1:0", m)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`baton_lock_held{lock="orders"} 1`, `baton_lock_token{lock="orders"} 7`, "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestInjectedMetricsPortIsServed runs the metrics server on exactly the address the webhook
// injects when the operator's --sidecar-metrics-port is set (":<port>", for the pod's IP), and
// scrapes it on an address other than loopback when this host has one.
func TestInjectedMetricsPortIsServed(t *testing.T) {
	port := testenv.FreePort(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "worker", Annotations: map[string]string{batonv1.AnnotationLock: "orders"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	dl := &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{"orders"}}}
	out, err := inject.Inject(pod, dl, inject.Config{Image: "baton:test", NativeSidecars: true, MetricsPort: int32(port),
		Cassandra: batonv1.CassandraConnection{ContactPoints: []string{"cassandra:9042"}}})
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar's environment as the kubelet gives it: plain values, and the downward API's.
	podEnv := map[string]string{"POD_NAMESPACE": "shop", "POD_NAME": "worker", "POD_UID": "u-1", "POD_IP": "10.0.0.7"}
	for _, e := range out.Spec.InitContainers[0].Env {
		if e.ValueFrom == nil {
			podEnv[e.Name] = e.Value
		}
	}
	opts, err := ParseOptions(nil, func(k string) string { return podEnv[k] })
	if err != nil {
		t.Fatalf("the injected sidecar's settings: %v", err)
	}
	m := newMetricSet()
	m.acquired("orders", 7)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := serveMetrics(ctx, opts.MetricsAddr, m)
	if err != nil {
		t.Fatalf("serving metrics on the injected address %q: %v", opts.MetricsAddr, err)
	}
	host := "127.0.0.1"
	if ip := nonLoopbackIP(t); ip != "" {
		host = ip
	}
	url := "http://" + net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)) + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `baton_lock_held{lock="orders"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("%s lacks %q", url, want)
	}
}

// nonLoopbackIP returns an IPv4 address of this host that is not loopback, or "" if it has none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
