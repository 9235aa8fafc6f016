package sidecarapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// startingService is a fakeService that is a Starter: Starting returns the error in waiting until
// it is set to nil.
type startingService struct {
	*fakeService
	waiting atomic.Pointer[error]
}

func (s *startingService) Starting() error {
	if p := s.waiting.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *startingService) wait(err error) { s.waiting.Store(&err) }

// TestStartingAnswers503: while the Service is starting, every route, probes included, answers
// 503 with code starting and the message of what it waits for, without calling the Service; once
// started, the same requests reach the Service.
func TestStartingAnswers503(t *testing.T) {
	const waiting = "waiting for Cassandra at 10.0.0.1:9042: dial tcp 10.0.0.1:9042: connect: connection refused (attempt 3)"
	f := &fakeService{t: t}
	svc := &startingService{fakeService: f}
	svc.wait(errors.New(waiting))
	h, err := newHandler(t, svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path, body string
		probe              bool
	}{
		{"GET", "/v1/locks", "", false},
		{"GET", "/v1/locks/orders", "", false},
		{"HEAD", "/v1/locks/orders", "", false},
		{"POST", "/v1/locks/orders/acquire", `{"wait":"5s"}`, false},
		{"POST", "/v1/locks/orders/release", `{"token":7}`, false},
		{"POST", "/v1/locks/orders/yield", "", false},
		{"GET", "/v1/events", "", false},
		{"GET", "/healthz", "", true},
		{"GET", "/readyz", "", true},
		{"GET", "/startupz", "", true},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body)))
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503; body %s", rec.Code, rec.Body)
			}
			if tc.method == "HEAD" {
				return
			}
			var body struct {
				Status, Error, Code string
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			if body.Code != sidecarclient.CodeStarting || body.Error != waiting {
				t.Errorf("answer %+v, want code %q and error %q", body, sidecarclient.CodeStarting, waiting)
			}
			if tc.probe && body.Status != "starting" {
				t.Errorf("probe answer status %q, want starting", body.Status)
			}
		})
	}
	if calls := f.Calls(); len(calls) != 0 {
		t.Errorf("the starting Service was called: %v", calls)
	}

	svc.wait(nil)
	withDeclared(f)
	f.started = func() bool { return true }
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/startupz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /startupz once started: %d %s, want 200", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/locks", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("GET /v1/locks once started: %d %s, want 200", rec.Code, rec.Body)
	}
}

// TestClientSeesStarting: the Go client returns a starting sidecar's answers as errors that
// match sidecarclient.ErrStarting and carry the message, and Ready says false without error.
func TestClientSeesStarting(t *testing.T) {
	const waiting = "waiting for the lock schema in keyspace baton"
	svc := &startingService{fakeService: &fakeService{t: t}}
	svc.wait(errors.New(waiting))
	c := serveUnixService(t, svc)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := c.Locks(ctx)
	var apiErr *sidecarclient.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || !errors.Is(err, sidecarclient.ErrStarting) ||
		apiErr.Message != waiting {
		t.Fatalf("Locks while starting: %v, want a 503 *Error matching ErrStarting with message %q", err, waiting)
	}
	if errors.Is(err, sidecarclient.ErrShuttingDown) {
		t.Error("a starting sidecar's answer matches ErrShuttingDown")
	}
	if ready, err := c.Ready(ctx); ready || err != nil {
		t.Errorf("Ready while starting = %v, %v; want false, nil", ready, err)
	}
	if _, _, err := c.Subscribe(ctx); !errors.Is(err, sidecarclient.ErrStarting) {
		t.Errorf("Subscribe while starting: %v, want ErrStarting", err)
	}
}
