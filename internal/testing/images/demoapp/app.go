package demoapp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// Status is the app's answer to GET /.
type Status struct {
	Pod    string              `json:"pod"`
	LockID string              `json:"lockId,omitempty"`
	State  sidecarclient.State `json:"state,omitempty"`
	// Token is the fencing token the pod holds; 0 unless State is held.
	Token  int64  `json:"token,omitempty"`
	Holder string `json:"holder,omitempty"`
	Writes Writes `json:"writes"`
	// Error says why the sidecar could not be asked.
	Error string `json:"error,omitempty"`
}

// Writes counts the app's writes to the fenced resource.
type Writes struct {
	Accepted int64 `json:"accepted"`
	Rejected int64 `json:"rejected"` // the store had seen a higher token
	Failed   int64 `json:"failed"`   // no answer from the sidecar or the store
	// LastToken is the token of the last write sent.
	LastToken int64 `json:"lastToken,omitempty"`
}

// Outcome is what one WriteOnce did.
type Outcome string

// The outcomes of WriteOnce.
const (
	Accepted Outcome = "accepted"
	Rejected Outcome = "rejected"
	Failed   Outcome = "failed"
	NotHeld  Outcome = "not-held" // the pod does not hold the lock: nothing written
	Disabled Outcome = "disabled" // no FencedURL: nothing written
)

// App is the demo app. It is safe for concurrent use.
type App struct {
	cfg     Config
	sidecar *sidecarclient.Client
	store   *fencedstore.Client
	log     logr.Logger
	clock   clock.WithTicker

	mu       sync.Mutex
	writes   Writes
	lastErr  string
	notReady bool // set through PUT /readyz, to show a lock following the app's health
}

// Option sets an optional knob of New.
type Option func(*App)

// WithClock sets the clock of the write loop (default: the real clock).
func WithClock(c clock.WithTicker) Option { return func(a *App) { a.clock = c } }

// New returns the app for cfg (defaults filled in, then validated), asking the sidecar through
// sidecar.
func New(cfg Config, sidecar *sidecarclient.Client, log logr.Logger, opts ...Option) (*App, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, sidecar: sidecar, log: log, clock: clock.RealClock{},
		store: fencedstore.NewClient(cfg.FencedURL, &http.Client{Timeout: 5 * time.Second})}
	for _, o := range opts {
		o(a)
	}
	return a, nil
}

// Handler serves GET / (Status as JSON; 503 when the sidecar does not answer), GET /healthz, and
// GET /readyz for a readiness probe: 200, or 503 once PUT /readyz with the body "false" made the
// app not ready (the body "true" makes it ready again). The demos and the end-to-end tests use it
// to show a lock following the app's health (spec.yieldWhenUnready).
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		st := a.Status(r.Context())
		code := http.StatusOK
		if st.Error != "" {
			code = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		notReady := a.notReady
		a.mu.Unlock()
		if notReady {
			http.Error(w, "not ready (PUT /readyz true to make it ready)", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.HandleFunc("PUT /readyz", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ready bool
		switch strings.TrimSpace(string(body)) {
		case "true":
			ready = true
		case "false":
		default:
			http.Error(w, `send the body "true" or "false"`, http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.notReady = !ready
		a.mu.Unlock()
		a.log.Info("readiness set", "ready", ready)
		_, _ = fmt.Fprintf(w, "ready: %v\n", ready)
	})
	return mux
}

// Status asks the sidecar for the lock's state now.
func (a *App) Status(ctx context.Context) Status {
	st := Status{Pod: a.cfg.PodName, Writes: a.Writes()}
	ls, err := a.lock(ctx)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.LockID, st.State, st.Holder = ls.LockID, ls.State, ls.Holder
	if ls.State == sidecarclient.StateHeld {
		st.Token = ls.Token
	}
	return st
}

// Writes returns the write counts so far.
func (a *App) Writes() Writes {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.writes
}

// Run writes once every WriteInterval until ctx is done, then returns nil. Without a FencedURL it
// just waits for ctx.
func (a *App) Run(ctx context.Context) error {
	if a.cfg.FencedURL == "" {
		<-ctx.Done()
		return nil
	}
	tick := a.clock.NewTicker(a.cfg.WriteInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			_, _ = a.WriteOnce(ctx) // WriteOnce logs what went wrong
		}
	}
}

// contendRetry is how long Contend waits after an answer that is not a grant.
const contendRetry = time.Second

// Contend asks the sidecar for the lock (Config.LockID, which it needs), waiting up to 30s, and
// once granted checks every half second that it still holds it, asking again when it does not,
// until ctx is done. Without Config.Contend it just waits for ctx. It is how a Try-mode app
// contends; refusals (held elsewhere, app not ready, superseded) are logged and retried.
func (a *App) Contend(ctx context.Context) error {
	if !a.cfg.Contend {
		<-ctx.Done()
		return nil
	}
	if a.cfg.LockID == "" {
		return fmt.Errorf("%w: contending needs %s", ErrInvalidConfig, EnvLockID)
	}
	for ctx.Err() == nil {
		st, err := a.sidecar.Acquire(ctx, a.cfg.LockID, 30*time.Second)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, sidecarclient.ErrLocked) {
				a.log.Info("not granted the lock", "err", err.Error())
			}
			_ = sleep(ctx, a.clock, contendRetry)
			continue
		}
		a.log.Info("holding the lock", "token", st.Token)
		for ctx.Err() == nil {
			if err := sleep(ctx, a.clock, contendRetry/2); err != nil {
				break
			}
			if now, err := a.sidecar.Lock(ctx, a.cfg.LockID); err == nil && (now.State != sidecarclient.StateHeld || now.Token != st.Token) {
				a.log.Info("no longer holding the lock", "state", now.State, "reason", now.Reason)
				break
			}
		}
	}
	return nil
}

// sleep waits d on clk, or until ctx is done (then it returns ctx's error).
func sleep(ctx context.Context, clk clock.WithTicker, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}

// WriteOnce asks the sidecar for the lock and, if the pod holds it, writes to the fenced resource
// with its token. The error says why the outcome is Failed or Rejected.
func (a *App) WriteOnce(ctx context.Context) (Outcome, error) {
	if a.cfg.FencedURL == "" {
		return Disabled, nil
	}
	ls, err := a.lock(ctx)
	if err != nil {
		return a.count(Failed, sidecarclient.LockStatus{}, err), err
	}
	if ls.State != sidecarclient.StateHeld {
		return NotHeld, nil
	}
	seq := a.Writes().Accepted + 1
	_, err = a.store.Write(ctx, fencedstore.Write{
		Token: ls.Token, Writer: a.cfg.PodName, Data: fmt.Sprintf("%s write %d", a.cfg.PodName, seq),
	})
	switch {
	case errors.Is(err, fencedstore.ErrRejected):
		return a.count(Rejected, ls, err), err
	case err != nil:
		return a.count(Failed, ls, err), err
	}
	return a.count(Accepted, ls, nil), nil
}

// count records an outcome and logs what is new: a new token, a rejection, an error that differs
// from the last one.
func (a *App) count(o Outcome, ls sidecarclient.LockStatus, err error) Outcome {
	token := ls.Token
	a.mu.Lock()
	defer a.mu.Unlock()
	switch o {
	case Accepted:
		if token != a.writes.LastToken {
			a.log.Info("writing with a new fencing token", "token", token, "lockId", ls.LockID)
		}
		a.writes.Accepted++
		a.lastErr = ""
	case Rejected:
		a.writes.Rejected++
		a.log.Info("write rejected by the fenced store", "token", token, "lockId", ls.LockID, "reason", err.Error())
	case Failed:
		a.writes.Failed++
		if err.Error() != a.lastErr {
			a.log.Error(err, "write failed")
		}
		a.lastErr = err.Error()
	}
	if token != 0 {
		a.writes.LastToken = token
	}
	return o
}

// lock returns the status of the configured lock, or of the first declared one.
func (a *App) lock(ctx context.Context) (sidecarclient.LockStatus, error) {
	if a.cfg.LockID != "" {
		return a.sidecar.Lock(ctx, a.cfg.LockID)
	}
	locks, err := a.sidecar.Locks(ctx)
	if err != nil {
		return sidecarclient.LockStatus{}, err
	}
	if len(locks) == 0 {
		return sidecarclient.LockStatus{}, errors.New("demoapp: the sidecar declares no lock: annotate the pod with " + batonv1.AnnotationLock)
	}
	return locks[0], nil
}

// RunJob is the app as the work of a Job: it writes writes times, WriteInterval apart, and
// returns nil only if the fenced store accepted every write. In mode Blocking the pod's app starts
// only once the sidecar holds the lock, so a write that finds the lock not held, or that the store
// rejects, means the singleton broke and fails the Job.
func (a *App) RunJob(ctx context.Context, writes int) error {
	if a.cfg.FencedURL == "" {
		return fmt.Errorf("%w: a job needs %s", ErrInvalidConfig, EnvFencedURL)
	}
	if writes < 1 {
		return fmt.Errorf("%w: a job makes at least one write, not %d", ErrInvalidConfig, writes)
	}
	for i := range writes {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-a.clock.After(a.cfg.WriteInterval):
			}
		}
		outcome, err := a.WriteOnce(ctx)
		if outcome != Accepted {
			return fmt.Errorf("demoapp: write %d of %d: %s: %w", i+1, writes, outcome, cmp.Or(err, errors.New("the lock is not held")))
		}
	}
	return nil
}
