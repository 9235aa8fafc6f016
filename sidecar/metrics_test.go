package sidecar

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

func TestMetricsFollowTheLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		m := NewMetrics()
		cut := mem.Client(1, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond})
		h, err := NewInstrumentedHolder(testOptions(t, "a", batonv1.ModeBlocking, "orders"), cut, logr.Discard(), m)
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
	m := NewMetrics()
	m.acquired("orders", 7)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := serveMetrics(ctx, "0.0.0.0:0", m); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("non-loopback metrics address accepted: %v", err)
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
