package sidecarapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// serveUnix serves a handler for f on a unix socket in a temporary directory and returns a sidecarclient.Client
// for it. The server is closed when the test ends.
func serveUnix(t *testing.T, f *fakeService, opts ...Option) (*sidecarclient.Client, string) {
	t.Helper()
	return serveUnixAt(t, f, opts...)
}

// serveUnixService is serveUnix for any Service.
func serveUnixService(t *testing.T, svc Service, opts ...Option) *sidecarclient.Client {
	t.Helper()
	c, _ := serveUnixAt(t, svc, opts...)
	return c
}

func serveUnixAt(t *testing.T, svc Service, opts ...Option) (*sidecarclient.Client, string) {
	t.Helper()
	h, err := newHandler(t, svc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "baton.sock")
	ln, err := ListenUnix(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return sidecarclient.New(path), path
}

func TestClient(t *testing.T) {
	ctx := t.Context()
	f := &fakeService{t: t}
	withDeclared(f)
	c, _ := serveUnix(t, f)

	t.Run("Locks", func(t *testing.T) {
		got, err := c.Locks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := declaredLocks()
		if len(got) != len(want) {
			t.Fatalf("Locks: %+v, want %+v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("Locks[%d] = %+v, want %+v", i, got[i], want[i])
			}
		}
	})
	t.Run("Lock", func(t *testing.T) {
		got, err := c.Lock(ctx, "b")
		if err != nil || got != declaredLocks()[1] {
			t.Fatalf("Lock(b) = %+v, %v; want %+v", got, err, declaredLocks()[1])
		}
	})
	t.Run("Lock unknown", func(t *testing.T) {
		_, err := c.Lock(ctx, "nope")
		var apiErr *sidecarclient.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || !errors.Is(err, sidecarclient.ErrUnknownLock) {
			t.Fatalf("Lock(nope) error = %v, want *Error 404 matching sidecarclient.ErrUnknownLock", err)
		}
		if errors.Is(err, sidecarclient.ErrLocked) {
			t.Errorf("error %v matches sidecarclient.ErrLocked", err)
		}
	})
	t.Run("Lock escapes ID", func(t *testing.T) {
		f := &fakeService{t: t}
		f.lock = func(id string) (sidecarclient.LockStatus, bool) {
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, id == "ns/a b?"
		}
		c, _ := serveUnix(t, f)
		if st, err := c.Lock(ctx, "ns/a b?"); err != nil || st.LockID != "ns/a b?" {
			t.Fatalf("Lock = %+v, %v", st, err)
		}
	})
	t.Run("Lock invalid ID", func(t *testing.T) {
		_, err := c.Lock(ctx, "")
		var apiErr *sidecarclient.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || apiErr.Code != sidecarclient.CodeBadRequest {
			t.Fatalf("Lock(\"\") error = %v, want *Error 400", err)
		}
	})
	t.Run("Acquire", func(t *testing.T) {
		want := sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateHeld, Token: 42, LeaseRemainingMs: 10000}
		f.acquire = acquireWants(t, "c", 5*time.Second, want, nil)
		got, err := c.Acquire(ctx, "c", 5*time.Second)
		if err != nil || got != want {
			t.Fatalf("Acquire = %+v, %v; want %+v", got, err, want)
		}
		f.acquire = acquireWants(t, "c", 0, want, nil)
		if _, err := c.Acquire(ctx, "c", 0); err != nil {
			t.Fatalf("Acquire(wait 0): %v", err)
		}
	})
	t.Run("Acquire locked", func(t *testing.T) {
		st := sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateWaiting, Holder: "ns/other", QueuePosition: 1}
		f.acquire = acquireWants(t, "c", time.Second, st, sidecarclient.ErrLocked)
		_, err := c.Acquire(ctx, "c", time.Second)
		var apiErr *sidecarclient.Error
		if !errors.Is(err, sidecarclient.ErrLocked) || !errors.As(err, &apiErr) {
			t.Fatalf("Acquire error = %v, want *Error matching sidecarclient.ErrLocked", err)
		}
		if apiErr.Status != http.StatusConflict || apiErr.Lock == nil || *apiErr.Lock != st {
			t.Errorf("Acquire error = %+v (lock %+v), want 409 with lock %+v", apiErr, apiErr.Lock, st)
		}
	})
	t.Run("Acquire while the app is not ready", func(t *testing.T) {
		st := sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateIdle, Token: 4, Reason: "not queueing: the app was not ready for 30s"}
		f.acquire = acquireWants(t, "c", 0, st, fmt.Errorf("%w: app container not ready", sidecarclient.ErrAppNotReady))
		_, err := c.Acquire(ctx, "c", 0)
		var apiErr *sidecarclient.Error
		if !errors.Is(err, sidecarclient.ErrAppNotReady) || errors.Is(err, sidecarclient.ErrLocked) || !errors.As(err, &apiErr) {
			t.Fatalf("Acquire error = %v, want *Error matching only sidecarclient.ErrAppNotReady", err)
		}
		if apiErr.Status != http.StatusConflict || apiErr.Code != sidecarclient.CodeAppNotReady || apiErr.Lock == nil || *apiErr.Lock != st ||
			!strings.Contains(apiErr.Error(), "app container not ready") {
			t.Errorf("Acquire error = %+v (lock %+v), want 409 %s with lock %+v and the reason", apiErr, apiErr.Lock, sidecarclient.CodeAppNotReady, st)
		}
	})
	t.Run("Acquire while shutting down", func(t *testing.T) {
		f.acquire = acquireWants(t, "c", time.Second, sidecarclient.LockStatus{}, sidecarclient.ErrShuttingDown)
		_, err := c.Acquire(ctx, "c", time.Second)
		var apiErr *sidecarclient.Error
		if !errors.Is(err, sidecarclient.ErrShuttingDown) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable {
			t.Fatalf("Acquire error = %v, want a 503 *Error matching sidecarclient.ErrShuttingDown", err)
		}
	})
	t.Run("Yield", func(t *testing.T) {
		want := sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateHeld, Token: 8}
		f.yield = yieldWants(t, "c", 0, 2*time.Second, want, nil)
		if got, err := c.Yield(ctx, "c", 0, 2*time.Second); err != nil || got != want {
			t.Fatalf("Yield = %+v, %v; want %+v", got, err, want)
		}
		f.yield = yieldWants(t, "c", 7, 0, want, nil)
		if got, err := c.Yield(ctx, "c", 7, 0); err != nil || got != want {
			t.Fatalf("Yield(token 7) = %+v, %v; want %+v", got, err, want)
		}
		f.yield = yieldWants(t, "c", 0, 0, sidecarclient.LockStatus{}, sidecarclient.ErrNotHeld)
		if _, err := c.Yield(ctx, "c", 0, 0); !errors.Is(err, sidecarclient.ErrNotHeld) {
			t.Fatalf("Yield when not held: %v", err)
		}
	})
	t.Run("Acquire answered 200 without a grant", func(t *testing.T) {
		// Older sidecars answered another acquisition in progress with its waiting state, and a
		// grant past its deadline with lost: the client never takes them for a grant.
		for _, st := range []sidecarclient.LockStatus{
			{LockID: "c", State: sidecarclient.StateWaiting, QueuePosition: 1},
			{LockID: "c", State: sidecarclient.StateLost, Token: 5},
			{LockID: "c", State: sidecarclient.StateHeld},
		} {
			old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(st)
			}))
			got, err := sidecarclient.NewTCP(old.URL).Acquire(ctx, "c", 0)
			old.Close()
			if !errors.Is(err, sidecarclient.ErrAcquiring) || got != st {
				t.Errorf("Acquire answered 200 %+v: %+v, %v; want the status and an error matching ErrAcquiring", st, got, err)
			}
		}
	})
	t.Run("Acquire in this pod already", func(t *testing.T) {
		for answer, sentinel := range map[error]error{
			fmt.Errorf("%w: another request is acquiring c", sidecarclient.ErrAcquiring): sidecarclient.ErrAcquiring,
			fmt.Errorf("%w: c is held with token 9", sidecarclient.ErrHeldByPod):         sidecarclient.ErrHeldByPod,
		} {
			st := sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateHeld, Token: 9}
			f.acquire = acquireWants(t, "c", 0, st, answer)
			_, err := c.Acquire(ctx, "c", 0)
			var apiErr *sidecarclient.Error
			if !errors.Is(err, sentinel) || errors.Is(err, sidecarclient.ErrLocked) || !errors.As(err, &apiErr) ||
				apiErr.Status != http.StatusConflict || apiErr.Lock == nil || *apiErr.Lock != st {
				t.Errorf("Acquire error = %v (%+v), want a 409 *Error matching only %v, with the lock's status", err, apiErr, sentinel)
			}
		}
	})
	t.Run("Acquire bad wait", func(t *testing.T) {
		_, err := c.Acquire(ctx, "c", -time.Second)
		var apiErr *sidecarclient.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
			t.Fatalf("Acquire(-1s) error = %v, want 400", err)
		}
	})
	t.Run("Release", func(t *testing.T) {
		f.release = releaseWants(t, "c", 42, sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateIdle}, nil)
		if st, err := c.Release(ctx, "c", 42); err != nil || st.State != sidecarclient.StateIdle {
			t.Fatalf("Release = %+v, %v", st, err)
		}
		f.release = releaseWants(t, "c", 0, sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateIdle}, nil)
		if st, err := c.Release(ctx, "c", 0); err != nil || st.State != sidecarclient.StateIdle {
			t.Fatalf("Release without a token = %+v, %v", st, err)
		}
		f.release = releaseWants(t, "c", 42, sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateIdle}, sidecarclient.ErrNotHeld)
		if _, err := c.Release(ctx, "c", 42); !errors.Is(err, sidecarclient.ErrNotHeld) {
			t.Fatalf("Release error = %v, want sidecarclient.ErrNotHeld", err)
		}
		held := sidecarclient.LockStatus{LockID: "c", State: sidecarclient.StateHeld, Token: 43}
		f.release = releaseWants(t, "c", 42, held, fmt.Errorf("%w: c is held with token 43, not 42", sidecarclient.ErrTokenMismatch))
		_, err := c.Release(ctx, "c", 42)
		var apiErr *sidecarclient.Error
		if !errors.Is(err, sidecarclient.ErrTokenMismatch) || !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict ||
			apiErr.Lock == nil || *apiErr.Lock != held || !strings.Contains(apiErr.Message, "not 42") {
			t.Fatalf("Release error = %v (%+v), want a 409 *Error matching sidecarclient.ErrTokenMismatch", err, apiErr)
		}
		f.release = releaseWants(t, "c", 42, sidecarclient.LockStatus{}, sidecarclient.ErrNotTryMode)
		if _, err := c.Release(ctx, "c", 42); !errors.Is(err, sidecarclient.ErrNotTryMode) {
			t.Fatalf("Release error = %v, want sidecarclient.ErrNotTryMode", err)
		}
	})
	t.Run("Ready", func(t *testing.T) {
		for _, want := range []bool{true, false} {
			f.ready = func() bool { return want }
			if got, err := c.Ready(ctx); err != nil || got != want {
				t.Errorf("Ready = %v, %v; want %v", got, err, want)
			}
		}
	})
}

func TestClientErrors(t *testing.T) {
	ctx := t.Context()
	t.Run("no server", func(t *testing.T) {
		c := sidecarclient.New(filepath.Join(t.TempDir(), "missing.sock"))
		if _, err := c.Locks(ctx); err == nil {
			t.Fatal("Locks without a server succeeded")
		}
		if _, err := c.Ready(ctx); err == nil {
			t.Fatal("Ready without a server succeeded")
		}
	})
	t.Run("non-JSON error", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "bad gateway", http.StatusBadGateway)
		}))
		defer srv.Close()
		c := sidecarclient.NewTCP(srv.URL + "/")
		_, err := c.Locks(ctx)
		var apiErr *sidecarclient.Error
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadGateway || apiErr.Message != "bad gateway" {
			t.Fatalf("Locks error = %#v, want *Error 502 with the body as message", err)
		}
		if _, err := c.Ready(ctx); !errors.As(err, &apiErr) {
			t.Fatalf("Ready error = %v, want *Error", err)
		}
	})
	t.Run("TCP", func(t *testing.T) {
		f := &fakeService{t: t}
		withDeclared(f)
		h, err := newHandler(t, f)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		if ls, err := sidecarclient.NewTCP(srv.URL).Locks(ctx); err != nil || len(ls) != 3 {
			t.Fatalf("Locks over TCP = %v, %v", ls, err)
		}
	})
}

func TestListenUnix(t *testing.T) {
	ctx := t.Context()
	t.Run("mode and directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "run", "baton", "baton.sock")
		ln, err := ListenUnix(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
			t.Errorf("socket mode %v, want a socket with 0660", fi.Mode())
		}
	})
	t.Run("stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "baton.sock")
		old, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		old.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = old.Close() // leaves the socket file behind, as a crashed sidecar would
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("stale socket missing: %v", err)
		}
		ln, err := ListenUnix(ctx, path)
		if err != nil {
			t.Fatalf("ListenUnix over a stale socket: %v", err)
		}
		_ = ln.Close()
	})
	t.Run("live socket is kept", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "baton.sock")
		live, err := ListenUnix(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer live.Close()
		if ln, err := ListenUnix(ctx, path); err == nil {
			_ = ln.Close()
			t.Fatal("ListenUnix took over a live socket")
		}
	})
	t.Run("regular file is kept", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "baton.sock")
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if ln, err := ListenUnix(ctx, path); err == nil {
			_ = ln.Close()
			t.Fatal("ListenUnix replaced a regular file")
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
			t.Fatalf("regular file changed: %q, %v", b, err)
		}
	})
}
