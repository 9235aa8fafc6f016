package demoapp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/baton-dev/baton/internal/testing/fakesidecar"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/sidecarclient"
)

var (
	held    = sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateHeld, Token: 42, Holder: "demo/demo-0"}
	waiting = sidecarclient.LockStatus{LockID: "orders", State: sidecarclient.StateWaiting, Holder: "demo/demo-1", QueuePosition: 1}
	other   = sidecarclient.LockStatus{LockID: "reports", State: sidecarclient.StateIdle}
)

// fixture is an app wired to a fake sidecar and a real fenced store.
type fixture struct {
	app     *App
	sidecar *fakesidecar.Service
	store   *fencedstore.Store
	url     string // the fenced resource
}

func newFixture(t *testing.T, cfg Config, opts ...Option) *fixture {
	t.Helper()
	f := &fixture{sidecar: &fakesidecar.Service{T: t}}
	store, err := fencedstore.New()
	if err != nil {
		t.Fatal(err)
	}
	f.store = store
	srv := httptest.NewServer(store)
	t.Cleanup(srv.Close)
	f.url = srv.URL + "/v1/resources/demo"
	if cfg.FencedURL == "set" {
		cfg.FencedURL = f.url
	}
	cfg.Socket = fakesidecar.Serve(t, f.sidecar)
	sc := sidecarclient.New(cfg.Socket)
	app, err := New(cfg, sc, logr.Discard(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	f.app = app
	return f
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lockID string
		locks  []sidecarclient.LockStatus
		code   int
		want   Status
	}{
		{"held", "orders", []sidecarclient.LockStatus{other, held}, 200,
			Status{Pod: "demo-0", LockID: "orders", State: sidecarclient.StateHeld, Token: 42, Holder: "demo/demo-0"}},
		{"first declared lock", "", []sidecarclient.LockStatus{held, other}, 200,
			Status{Pod: "demo-0", LockID: "orders", State: sidecarclient.StateHeld, Token: 42, Holder: "demo/demo-0"}},
		{"waiting: no token", "", []sidecarclient.LockStatus{waiting}, 200,
			Status{Pod: "demo-0", LockID: "orders", State: sidecarclient.StateWaiting, Holder: "demo/demo-1"}},
		{"lost: no token", "", []sidecarclient.LockStatus{{LockID: "orders", State: sidecarclient.StateLost, Token: 41, Reason: "lease expired"}}, 200,
			Status{Pod: "demo-0", LockID: "orders", State: sidecarclient.StateLost}},
		{"unknown lock", "nope", []sidecarclient.LockStatus{held}, 503,
			Status{Pod: "demo-0", Error: `baton: 404 Not Found: lock "nope" is not declared for this pod (declared: "orders"); check the lock IDs of its DistributedLock`}},
		{"no lock declared", "", nil, 503,
			Status{Pod: "demo-0", Error: "demoapp: the sidecar declares no lock: annotate the pod with baton.dev/lock"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{PodName: "demo-0", LockID: tc.lockID})
			f.sidecar.SetLocks(tc.locks...)
			srv := httptest.NewServer(f.app.Handler())
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			var got Status
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("GET /: %s %q, want %d application/json", resp.Status, resp.Header.Get("Content-Type"), tc.code)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GET / (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("sidecar not running", func(t *testing.T) {
		app, err := New(Config{PodName: "demo-0", Socket: filepath.Join(t.TempDir(), "none.sock")},
			sidecarclient.New(filepath.Join(t.TempDir(), "none.sock")), logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "none.sock") {
			t.Errorf("GET /: %d %s, want 503 naming the socket", rec.Code, rec.Body)
		}
		rec = httptest.NewRecorder()
		app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET /healthz: %d, want 200 without the sidecar", rec.Code)
		}
	})
	t.Run("readiness", func(t *testing.T) {
		app, err := New(Config{PodName: "demo-0", Socket: filepath.Join(t.TempDir(), "none.sock")},
			sidecarclient.New(filepath.Join(t.TempDir(), "none.sock")), logr.Discard())
		if err != nil {
			t.Fatal(err)
		}
		serve := func(method, body string) int {
			rec := httptest.NewRecorder()
			app.Handler().ServeHTTP(rec, httptest.NewRequest(method, "/readyz", strings.NewReader(body)))
			return rec.Code
		}
		for _, step := range []struct {
			method, body string
			want         int
		}{
			{http.MethodGet, "", http.StatusOK},
			{http.MethodPut, "false", http.StatusOK},
			{http.MethodGet, "", http.StatusServiceUnavailable},
			{http.MethodPut, "maybe", http.StatusBadRequest},
			{http.MethodGet, "", http.StatusServiceUnavailable},
			{http.MethodPut, "true\n", http.StatusOK},
			{http.MethodGet, "", http.StatusOK},
		} {
			if got := serve(step.method, step.body); got != step.want {
				t.Fatalf("%s /readyz %q: %d, want %d", step.method, step.body, got, step.want)
			}
		}
	})
}

func TestWriteOnce(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t, Config{PodName: "demo-0", FencedURL: "set"})

	f.sidecar.SetLocks(waiting)
	if o, err := f.app.WriteOnce(ctx); o != NotHeld || err != nil {
		t.Fatalf("WriteOnce while waiting = %v, %v; want %v", o, err, NotHeld)
	}
	f.sidecar.SetLocks(held)
	if o, err := f.app.WriteOnce(ctx); o != Accepted || err != nil {
		t.Fatalf("WriteOnce while holding = %v, %v; want %v", o, err, Accepted)
	}
	// The lock passes to demo-1 (token 43), which writes; demo-0's sidecar has not noticed yet.
	if res := f.store.Apply("demo", fencedstore.Write{Token: 43, Writer: "demo-1"}); !res.Accepted {
		t.Fatalf("demo-1's write: %+v", res)
	}
	o, err := f.app.WriteOnce(ctx)
	if o != Rejected || !errors.Is(err, fencedstore.ErrRejected) {
		t.Fatalf("WriteOnce with a superseded token = %v, %v; want %v and ErrRejected", o, err, Rejected)
	}
	f.sidecar.SetLocks()
	if o, err := f.app.WriteOnce(ctx); o != Failed || err == nil {
		t.Fatalf("WriteOnce without a declared lock = %v, %v; want %v", o, err, Failed)
	}

	if diff := cmp.Diff(Writes{Accepted: 1, Rejected: 1, Failed: 1, LastToken: 42}, f.app.Writes()); diff != "" {
		t.Errorf("write counts (-want +got):\n%s", diff)
	}
	res := f.store.Resource("demo")
	if res.Accepted != 2 || res.Rejected != 1 || res.Conflicts != 0 || res.Writes[0].Writer != "demo-0" || res.Writes[0].Token != 42 {
		t.Errorf("the store saw %+v", res)
	}

	t.Run("store down", func(t *testing.T) {
		f := newFixture(t, Config{PodName: "demo-0", FencedURL: "http://127.0.0.1:1/v1/resources/demo"})
		f.sidecar.SetLocks(held)
		if o, err := f.app.WriteOnce(ctx); o != Failed || err == nil || errors.Is(err, fencedstore.ErrRejected) {
			t.Fatalf("WriteOnce = %v, %v; want %v", o, err, Failed)
		}
	})
	t.Run("no fenced URL", func(t *testing.T) {
		f := newFixture(t, Config{PodName: "demo-0"})
		if o, err := f.app.WriteOnce(ctx); o != Disabled || err != nil {
			t.Fatalf("WriteOnce = %v, %v; want %v", o, err, Disabled)
		}
	})
}

func TestRun(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	f := newFixture(t, Config{PodName: "demo-0", FencedURL: "set", WriteInterval: time.Second}, WithClock(clk))
	f.sidecar.SetLocks(held)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.app.Run(ctx) }()
	for i := int64(1); i <= 3; i++ {
		waitFor(t, clk.HasWaiters, "the write loop's ticker")
		clk.Step(time.Second)
		waitFor(t, func() bool { return f.app.Writes().Accepted == i }, "write %d", i)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10s after its context ended")
	}
	if got := f.store.Resource("demo").Accepted; got != 3 {
		t.Errorf("the store accepted %d writes, want 3", got)
	}

	t.Run("without a fenced URL it waits", func(t *testing.T) {
		f := newFixture(t, Config{PodName: "demo-0"})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		if err := f.app.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRunJob(t *testing.T) {
	cfg := Config{PodName: "job-0", FencedURL: "set", WriteInterval: 10 * time.Millisecond, ListenAddr: DefaultListenAddr}
	t.Run("every write accepted", func(t *testing.T) {
		f := newFixture(t, cfg)
		f.sidecar.SetLocks(held)
		if err := f.app.RunJob(t.Context(), 3); err != nil {
			t.Fatal(err)
		}
		if w := f.app.Writes(); w.Accepted != 3 || w.Rejected != 0 {
			t.Errorf("writes %+v, want 3 accepted", w)
		}
	})
	t.Run("not held", func(t *testing.T) {
		f := newFixture(t, cfg)
		f.sidecar.SetLocks(waiting)
		if err := f.app.RunJob(t.Context(), 3); err == nil || !strings.Contains(err.Error(), "write 1 of 3") {
			t.Errorf("RunJob without the lock: %v, want an error at write 1", err)
		}
	})
	t.Run("stale token", func(t *testing.T) {
		f := newFixture(t, cfg)
		f.sidecar.SetLocks(held)
		if _, err := fencedstore.NewClient(f.url, http.DefaultClient).Write(t.Context(), fencedstore.Write{Token: held.Token + 1, Writer: "next"}); err != nil {
			t.Fatal(err)
		}
		if err := f.app.RunJob(t.Context(), 2); !errors.Is(err, fencedstore.ErrRejected) {
			t.Errorf("RunJob with a superseded token: %v, want ErrRejected", err)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		f := newFixture(t, cfg)
		if err := f.app.RunJob(t.Context(), 0); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("RunJob(0): %v, want ErrInvalidConfig", err)
		}
	})
}
