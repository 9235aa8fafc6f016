package sidecarapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/baton-dev/baton/sidecarclient"

	"github.com/go-logr/logr"
)

const (
	// maxLockIDBytes bounds lock IDs in paths.
	maxLockIDBytes = 256
	// answerWriteTimeout bounds sending one JSON answer, from when the handler writes it.
	answerWriteTimeout = 10 * time.Second
	// routesHelp lists the routes in "no route" answers.
	routesHelp = "GET /v1/locks, GET /v1/locks/{lockID}, POST /v1/locks/{lockID}/acquire, " +
		"POST /v1/locks/{lockID}/release, POST /v1/locks/{lockID}/yield, GET /v1/events, GET /healthz, GET /readyz, GET /startupz"
)

// handler serves the API for one Service.
type handler struct {
	svc  Service
	log  logr.Logger
	opts options
	mux  *http.ServeMux
}

// NewHandler returns the API handler for svc. It validates svc and the options before returning,
// and never panics while serving: a panicking Service is logged and answered with 500.
func NewHandler(svc Service, opts ...Option) (http.Handler, error) {
	if svc == nil {
		return nil, errors.New("api: NewHandler needs a Service, got nil")
	}
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("api: NewHandler got a nil Option")
		}
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	h := &handler{svc: svc, log: o.log, opts: o, mux: http.NewServeMux()}
	// GET patterns also answer HEAD.
	h.handle("GET /v1/locks", h.listLocks)
	h.handle("GET /v1/locks/{lockID}", h.getLock)
	h.handle("POST /v1/locks/{lockID}/acquire", h.acquire)
	h.handle("POST /v1/locks/{lockID}/release", h.release)
	h.handle("POST /v1/locks/{lockID}/yield", h.yield)
	h.handle("GET /v1/events", h.events)
	h.handle("GET /healthz", h.healthz)
	h.handle("GET /readyz", h.readyz)
	h.handle("GET /startupz", h.startupz)
	return h, nil
}

// handle registers fn for pattern and marks responses written by it as routed, so that ServeHTTP
// can tell them from the ServeMux's own plain-text fallbacks (404, 405, redirects).
func (h *handler) handle(pattern string, fn http.HandlerFunc) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if rw, ok := w.(*responseWriter); ok {
			rw.routed = true
		}
		if h.answeredStarting(w, r) {
			return
		}
		fn(w, r)
	})
}

// answeredStarting answers r with 503 starting while the Service is starting (Starter), and
// reports whether it did. The probes' answers keep their status field, so that a probe reading
// only the status still sees why.
func (h *handler) answeredStarting(w http.ResponseWriter, r *http.Request) bool {
	st, ok := h.svc.(Starter)
	if !ok {
		return false
	}
	err := st.Starting()
	if err == nil {
		return false
	}
	switch r.URL.Path {
	case "/healthz", "/readyz", "/startupz":
		writeJSON(w, http.StatusServiceUnavailable, struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Code   string `json:"code"`
		}{"starting", err.Error(), sidecarclient.CodeStarting})
	default:
		writeError(w, &apiError{status: http.StatusServiceUnavailable, code: sidecarclient.CodeStarting, msg: err.Error()})
	}
	return true
}

// ServeHTTP serves one request: recover from panics, route, and turn the mux's fallbacks into
// JSON answers.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &responseWriter{ResponseWriter: w}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.log.Error(fmt.Errorf("panic: %v", p), "API handler panicked; answering 500",
				"method", r.Method, "path", r.URL.Path, "stack", string(debug.Stack()))
			if rw.status == 0 || !rw.routed {
				rw.routed = true
				rw.status = 0
				writeError(rw, &apiError{status: http.StatusInternalServerError, code: sidecarclient.CodeInternal,
					msg: "internal error in the baton sidecar (see its log); retry, and report it if it persists"})
			}
		}
		h.log.V(1).Info("Served API request", "method", r.Method, "path", r.URL.Path,
			"status", rw.status, "duration", time.Since(start))
	}()
	h.mux.ServeHTTP(rw, r)
	if !rw.routed {
		status := rw.status
		rw.routed = true
		rw.status = 0
		writeError(rw, h.fallback(rw.Header(), r, status))
	}
}

// fallback turns a response of the ServeMux's own (status, headers already in hdr) into an error
// answer.
func (h *handler) fallback(hdr http.Header, r *http.Request, status int) *apiError {
	loc := hdr.Get("Location")
	hdr.Del("Location")
	p := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(p, sidecarclient.LocksPath); ok && (rest == "" || rest[0] == '/') {
		return badRequest("lock ID in path %q must not be empty; use /v1/locks/{lockID}", clip(p))
	}
	switch {
	case status == http.StatusMethodNotAllowed:
		return &apiError{status: http.StatusMethodNotAllowed, code: sidecarclient.CodeMethodNotAllowed,
			msg: fmt.Sprintf("method %q is not allowed on %q; use %s", clip(r.Method), clip(p), hdr.Get("Allow"))}
	case status == http.StatusBadRequest:
		return badRequest("malformed request target %q; use one of %s", clip(r.RequestURI), routesHelp)
	case status >= 300 && status < 400:
		target := loc
		if u, err := url.Parse(loc); err == nil {
			target = u.Path
		}
		return &apiError{status: http.StatusNotFound, code: sidecarclient.CodeNotFound,
			msg: fmt.Sprintf("no route for path %q: it is not canonical (empty, '.' or '..' segments); did you mean %q?",
				clip(p), clip(target))}
	default:
		return &apiError{status: http.StatusNotFound, code: sidecarclient.CodeNotFound,
			msg: fmt.Sprintf("no route for %s %q; routes: %s", clip(r.Method), clip(p), routesHelp)}
	}
}

func (h *handler) listLocks(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Locks []sidecarclient.LockStatus `json:"locks"`
	}{h.locks()})
}

func (h *handler) getLock(w http.ResponseWriter, r *http.Request) {
	id, aerr := lockIDFrom(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st, ok := h.svc.Lock(id)
	if !ok {
		writeError(w, h.unknownLock(id))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *handler) acquire(w http.ResponseWriter, r *http.Request) {
	h.withWait(w, r, "acquire", func(ctx context.Context, id string, _ int64, wait time.Duration) (sidecarclient.LockStatus, error) {
		st, err := h.svc.Acquire(ctx, id, wait)
		if err == nil && !st.Granted() {
			// A 200 tells the caller it holds the lock: never without a grant.
			err = fmt.Errorf("the lock service answered state %q with token %d, which grants nothing", st.State, st.Token)
		}
		return st, err
	})
}

func (h *handler) yield(w http.ResponseWriter, r *http.Request) {
	h.withWait(w, r, "yield", h.svc.Yield)
}

// withWait serves a request on one lock that takes a wait (acquire, yield; yield also a token)
// with the Service's method for it.
func (h *handler) withWait(w http.ResponseWriter, r *http.Request, op string,
	call func(ctx context.Context, lockID string, token int64, wait time.Duration) (sidecarclient.LockStatus, error)) {
	id, aerr := lockIDFrom(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	wait, token, aerr := h.parseWait(w, r, op == "yield")
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st, err := call(r.Context(), id, token, wait)
	if err != nil {
		writeError(w, h.serviceError(r, op, id, st, err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// releaseHint names the fields of a release body in error answers.
const releaseHint = `the only field is "token", the fencing token of the grant to release, e.g. {"token":1795419806766942}; or send no body`

func (h *handler) release(w http.ResponseWriter, r *http.Request) {
	id, aerr := lockIDFrom(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	// The body, if any, names the grant to release: {"token":N}.
	var body sidecarclient.ReleaseRequest
	if aerr := decodeBody(w, r, &body, releaseHint); aerr != nil {
		writeError(w, aerr)
		return
	}
	token, aerr := checkToken(body.Token, releaseHint)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	st, err := h.svc.Release(r.Context(), id, token)
	if err != nil {
		writeError(w, h.serviceError(r, "release", id, st, err))
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// checkToken returns the token of a release or yield body: 0 when absent, else a positive
// fencing token.
func checkToken(t *int64, hint string) (int64, *apiError) {
	switch {
	case t == nil:
		return 0, nil
	case *t <= 0:
		return 0, badRequest(`body field "token" is %d; a fencing token is a positive integer (the "token" of the acquire answer); %s`, *t, hint)
	}
	return *t, nil
}

// parseWait reads the wait from the body ({"wait":"5s"}) or the query (?wait=5s), and with
// withToken (yield) the token from the body ({"token":N}).
func (h *handler) parseWait(w http.ResponseWriter, r *http.Request, withToken bool) (time.Duration, int64, *apiError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return 0, 0, badRequest("malformed query string: %v; use ?wait=<duration>, e.g. ?wait=5s", err)
	}
	for k := range q {
		if k != "wait" {
			return 0, 0, badRequest("unknown query parameter %q; the only parameter is wait, e.g. ?wait=5s", clip(k))
		}
	}
	var (
		bodyWait *string
		token    int64
	)
	if withToken {
		const hint = `the fields are "wait", e.g. {"wait":"5s"}, and "token", the fencing token of the grant to yield`
		var body sidecarclient.YieldRequest
		if aerr := decodeBody(w, r, &body, hint); aerr != nil {
			return 0, 0, aerr
		}
		var aerr *apiError
		if token, aerr = checkToken(body.Token, hint); aerr != nil {
			return 0, 0, aerr
		}
		bodyWait = body.Wait
	} else {
		var body sidecarclient.AcquireRequest
		if aerr := decodeBody(w, r, &body, `the only field is "wait", e.g. {"wait":"5s"}`); aerr != nil {
			return 0, 0, aerr
		}
		bodyWait = body.Wait
	}
	qw, inQuery := q["wait"]
	var wait time.Duration
	var aerr *apiError
	switch {
	case inQuery && bodyWait != nil:
		aerr = badRequest("wait is given both in the query and in the body; give it once")
	case inQuery && len(qw) > 1:
		aerr = badRequest("query parameter wait is given %d times; give it once", len(qw))
	case inQuery:
		wait, aerr = h.checkWait("query parameter wait", qw[0])
	case bodyWait != nil:
		wait, aerr = h.checkWait(`body field "wait"`, *bodyWait)
	}
	return wait, token, aerr
}

func (h *handler) checkWait(field, s string) (time.Duration, *apiError) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > h.opts.maxWait {
		return 0, badRequest("%s is %q; it must be a Go duration from 0s to %v, e.g. \"5s\" (0s or absent: try once)",
			field, clip(s), h.opts.maxWait)
	}
	return d, nil
}

// decodeBody decodes an optional JSON object body into dst, strictly: unknown fields, trailing data
// and bodies over MaxBodyBytes are errors. An empty body leaves dst alone. hint tells the user
// which fields are allowed.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any, hint string) *apiError {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, sidecarclient.MaxBodyBytes)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if errors.Is(err, io.EOF) {
		return nil // empty body
	}
	if err == nil {
		// Exactly one JSON value: only whitespace may follow.
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return nil
		}
		if err == nil {
			return badRequest("request body has data after the JSON object; send a single object (%s)", hint)
		}
	}
	var (
		tooBig  *http.MaxBytesError
		syntax  *json.SyntaxError
		typeErr *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return bodyTimeout()
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, code: sidecarclient.CodeTooLarge,
			msg: fmt.Sprintf("request body is larger than %d bytes (1 MiB); %s", sidecarclient.MaxBodyBytes, hint)}
	case errors.As(err, &syntax):
		return badRequest("request body is not valid JSON (at byte %d: %v); %s", syntax.Offset, syntax, hint)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body is truncated JSON; %s", hint)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return badRequest("request body must be a JSON object, got a JSON %s; %s", typeErr.Value, hint)
		}
		return badRequest("field %q must be %v, got a JSON %s; %s", typeErr.Field, jsonKind(typeErr.Type.String()), typeErr.Value, hint)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return badRequest("unknown field %s in request body; %s", clip(field), hint)
	default:
		return badRequest("cannot read request body: %v; %s", err, hint)
	}
}

// bodyTimeout is the answer to a request whose body did not arrive within the server's read
// timeout (WithReadTimeout).
func bodyTimeout() *apiError {
	return &apiError{status: http.StatusRequestTimeout, code: sidecarclient.CodeBadRequest,
		msg: "request body did not arrive in time: the sidecar gives a request a bounded time to arrive, headers and body; send it at once, with a Content-Length that matches the body"}
}

// drainBody reads and discards the body of a request that takes none, within the server's read
// timeout and MaxBodyBytes, so that a long-lived answer (the event stream) never waits on one.
func drainBody(w http.ResponseWriter, r *http.Request) *apiError {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	_, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, sidecarclient.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return bodyTimeout()
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, code: sidecarclient.CodeTooLarge,
			msg: fmt.Sprintf("request body is larger than %d bytes (1 MiB); %s takes no body", sidecarclient.MaxBodyBytes, r.URL.Path)}
	default:
		return badRequest("cannot read request body: %v; %s takes no body", err, r.URL.Path)
	}
}

// jsonKind names a Go type as a JSON user would, with its article.
func jsonKind(goType string) string {
	switch goType {
	case "string", "*string":
		return "a string (a Go duration such as \"5s\")"
	case "int64", "*int64":
		return "an integer (a fencing token such as 1795419806766942)"
	}
	return "a " + goType
}

// serviceError maps an error from Service.Acquire or Release to an error answer.
func (h *handler) serviceError(r *http.Request, op, id string, st sidecarclient.LockStatus, err error) *apiError {
	var lock *sidecarclient.LockStatus
	if st.LockID != "" || st.State != "" {
		lock = &st
	}
	detail := ""
	if s := sentinelOf(err); s == nil || err.Error() != s.Error() {
		detail = " (" + err.Error() + ")"
	}
	switch {
	case errors.Is(err, sidecarclient.ErrUnknownLock):
		return h.unknownLock(id)
	case errors.Is(err, sidecarclient.ErrNotTryMode):
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeNotTryMode, lock: lock,
			msg: fmt.Sprintf("lock %q is not in Try mode: the sidecar acquires and holds it by itself, so the app cannot %s it%s",
				id, op, detail)}
	case errors.Is(err, sidecarclient.ErrNotHeld):
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeNotHeld, lock: lock,
			msg: fmt.Sprintf("lock %q is not held by this pod, so there is nothing to %s%s", id, op, detail)}
	case errors.Is(err, sidecarclient.ErrLocked):
		holder := ""
		if lock != nil && lock.Holder != "" {
			holder = " by " + lock.Holder
		}
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeLocked, lock: lock,
			msg: fmt.Sprintf("lock %q is held elsewhere%s; retry later or ask for a longer wait (up to %v)%s",
				id, holder, h.opts.maxWait, detail)}
	case errors.Is(err, sidecarclient.ErrAppNotReady):
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeAppNotReady, lock: lock,
			msg: fmt.Sprintf("lock %q is not taken while the app is not ready (yieldWhenUnready)%s", id, detail)}
	case errors.Is(err, sidecarclient.ErrSuperseded):
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeSuperseded, lock: lock,
			msg: fmt.Sprintf("lock %q is not taken: this pod is superseded by a newer revision of its workload (handoff NewestRevision)%s", id, detail)}
	case errors.Is(err, sidecarclient.ErrAcquiring):
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeAcquiring, lock: lock,
			msg: fmt.Sprintf("another acquisition of lock %q is in progress in this pod (another process asked first, or the pod's previous grant is still ending); nothing was granted to this request: retry later%s",
				id, detail)}
	case errors.Is(err, sidecarclient.ErrHeldByPod):
		token := ""
		if lock != nil && lock.Token > 0 {
			token = fmt.Sprintf(" (token %d)", lock.Token)
		}
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeHeldByPod, lock: lock,
			msg: fmt.Sprintf("lock %q is already held by this pod%s for the process that acquired it; it is not granted twice: retry once that process released it%s",
				id, token, detail)}
	case errors.Is(err, sidecarclient.ErrTokenMismatch):
		return &apiError{status: http.StatusConflict, code: sidecarclient.CodeTokenMismatch, lock: lock,
			msg: fmt.Sprintf("lock %q is not held with the token given: did not %s it%s", id, op, detail)}
	case errors.Is(err, sidecarclient.ErrShuttingDown):
		return &apiError{status: http.StatusServiceUnavailable, code: sidecarclient.CodeShuttingDown, lock: lock,
			msg: fmt.Sprintf("the sidecar is shutting down (SIGTERM): it will not %s lock %q%s", op, id, detail)}
	case r.Context().Err() != nil:
		return &apiError{status: http.StatusServiceUnavailable, code: sidecarclient.CodeUnavailable, lock: lock,
			msg: fmt.Sprintf("%s of lock %q was cancelled because the request ended: %v", op, id, err)}
	default:
		h.log.Error(err, "Lock service failed", "op", op, "lockID", id)
		return &apiError{status: http.StatusInternalServerError, code: sidecarclient.CodeInternal, lock: lock,
			msg: fmt.Sprintf("%s of lock %q failed: %v; retry, and check the sidecar's log if it persists", op, id, err)}
	}
}

// sentinelOf returns the sentinel error err wraps, or nil.
func sentinelOf(err error) error {
	for _, s := range []error{sidecarclient.ErrUnknownLock, sidecarclient.ErrNotTryMode, sidecarclient.ErrNotHeld, sidecarclient.ErrLocked,
		sidecarclient.ErrAppNotReady, sidecarclient.ErrSuperseded, sidecarclient.ErrShuttingDown, sidecarclient.ErrAcquiring,
		sidecarclient.ErrHeldByPod, sidecarclient.ErrTokenMismatch} {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}

// unknownLock is the 404 answer for a lock ID that is not declared, listing the declared ones.
func (h *handler) unknownLock(id string) *apiError {
	const maxListed = 10
	var ids []string
	for i, st := range h.locks() {
		if i == maxListed {
			ids = append(ids, "...")
			break
		}
		ids = append(ids, fmt.Sprintf("%q", st.LockID))
	}
	declared := "none"
	if len(ids) > 0 {
		declared = strings.Join(ids, ", ")
	}
	return &apiError{status: http.StatusNotFound, code: sidecarclient.CodeUnknownLock,
		msg: fmt.Sprintf("lock %q is not declared for this pod (declared: %s); check the lock IDs of its DistributedLock", id, declared)}
}

// locks returns the Service's locks, never nil, so they encode as [].
func (h *handler) locks() []sidecarclient.LockStatus {
	ls := h.svc.Locks()
	if ls == nil {
		ls = []sidecarclient.LockStatus{}
	}
	return ls
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.Healthy(r.Context()); err != nil {
		h.log.V(1).Info("Health check failed", "err", err.Error())
		writeJSON(w, http.StatusServiceUnavailable, struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Code   string `json:"code"`
		}{"unhealthy", err.Error(), sidecarclient.CodeUnavailable})
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Status string `json:"status"`
	}{"ok"})
}

func (h *handler) readyz(w http.ResponseWriter, _ *http.Request) {
	type body struct {
		Status string                     `json:"status"`
		Locks  []sidecarclient.LockStatus `json:"locks"`
	}
	// Ready first: a lock listed as held next to "not ready" is less confusing than the reverse.
	if !h.svc.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, body{"not ready", h.locks()})
		return
	}
	writeJSON(w, http.StatusOK, body{"ready", h.locks()})
}

func (h *handler) startupz(w http.ResponseWriter, _ *http.Request) {
	type body struct {
		Status string `json:"status"`
	}
	if !h.svc.Started() {
		writeJSON(w, http.StatusServiceUnavailable, body{"starting"})
		return
	}
	writeJSON(w, http.StatusOK, body{"started"})
}

// lockIDFrom returns the valid lock ID in r's path.
func lockIDFrom(r *http.Request) (string, *apiError) {
	id := r.PathValue("lockID")
	if err := validateLockID(id); err != nil {
		return "", badRequest("%v", err)
	}
	return id, nil
}

// validateLockID checks a lock ID from a path: non-empty, at most maxLockIDBytes bytes of UTF-8
// without control characters.
func validateLockID(id string) error {
	switch {
	case id == "":
		return errors.New("lock ID must not be empty; use /v1/locks/{lockID}")
	case len(id) > maxLockIDBytes:
		return fmt.Errorf("lock ID %q... is %d bytes long; lock IDs are at most %d bytes", clip(id), len(id), maxLockIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("lock ID %q is not valid UTF-8; percent-encode UTF-8 text", clip(id))
	case strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("lock ID %q contains control characters; lock IDs are printable text", clip(id))
	}
	return nil
}

// clip shortens user input quoted in error messages.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	// Cut on a rune boundary when the input is UTF-8; %q escapes anything else.
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, sidecarclient.ErrorBody{Error: e.msg, Code: e.code, LockStatus: e.lock})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a Service returning unencodable values gets here; sidecarclient.LockStatus always encodes.
		status = http.StatusInternalServerError
		b, _ = json.Marshal(sidecarclient.ErrorBody{Error: "cannot encode the answer: " + err.Error(), Code: sidecarclient.CodeInternal})
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Del("Content-Length")
	// The answer goes out when the handler returns; a client that does not read it may hold the
	// connection this long at most. Not every writer supports deadlines (httptest).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerWriteTimeout))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// responseWriter records the status for logs and panics, and swallows what the ServeMux's own
// fallback handlers write (routed == false) so ServeHTTP can answer in JSON instead.
type responseWriter struct {
	http.ResponseWriter
	routed bool
	status int
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status != 0 && code >= 200 {
		return
	}
	if code >= 200 {
		w.status = code
	}
	if w.routed {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.routed {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// FlushError flushes the underlying writer; http.ResponseController finds it.
func (w *responseWriter) FlushError() error {
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the underlying writer (write deadlines).
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
