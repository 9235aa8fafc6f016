package demoapp

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// fakeSidecar serves the two read routes of the sidecar API that the app uses, GET /v1/locks and
// GET /v1/locks/{lockID}, from a settable list of locks. Any other request fails the test.
type fakeSidecar struct {
	t *testing.T

	mu    sync.Mutex
	locks []sidecarclient.LockStatus
}

func (f *fakeSidecar) set(locks ...sidecarclient.LockStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.locks = locks
}

func (f *fakeSidecar) snapshot() []sidecarclient.LockStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sidecarclient.LockStatus(nil), f.locks...)
}

func (f *fakeSidecar) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/locks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"locks": f.snapshot()})
	})
	mux.HandleFunc("GET /v1/locks/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		for _, l := range f.snapshot() {
			if l.LockID == id {
				writeJSON(w, http.StatusOK, l)
				return
			}
		}
		writeJSON(w, http.StatusNotFound, sidecarclient.ErrorBody{Error: "lock " + id + " is not declared", Code: sidecarclient.CodeUnknownLock})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f.t.Errorf("unexpected request to the sidecar: %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusNotFound)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveSidecar serves f on a unix socket, as the sidecar does, and returns the socket's path. The
// server is closed when the test ends.
func serveSidecar(t *testing.T, f *fakeSidecar) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "baton.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f.handler(), ReadHeaderTimeout: 5 * time.Second}
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
	return path
}
