package sidecarapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// fuzzService is a fakeService with every method answering deterministically, and only with the
// errors the sidecar's holder gives for that method (the API document lists them by operation):
// lock "a" is held with token 1 (a release or yield naming another token is refused), "busy" is
// held elsewhere, "acquiring" is being acquired by another request of the pod, "mine" is held by
// the pod for another request (token 5), "blocking" is in Blocking mode, "idle" is not held,
// anything else is unknown. It fails the test if the handler passes it a wait outside the allowed
// bounds or a lock ID that should have been rejected.
func fuzzService(t *testing.T) *fakeService {
	f := &fakeService{t: t}
	withDeclared(f)
	check := func(id string) {
		if err := validateLockID(id); err != nil {
			t.Errorf("service got invalid lock ID %q: %v", id, err)
		}
	}
	answer := func(id string) (sidecarclient.LockStatus, error) {
		switch id {
		case "a":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: 1}, nil
		case "busy":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateWaiting, Holder: "ns/other", QueuePosition: 1}, sidecarclient.ErrLocked
		case "acquiring":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateWaiting, QueuePosition: 1}, sidecarclient.ErrAcquiring
		case "mine":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: 5}, sidecarclient.ErrHeldByPod
		case "blocking":
			return sidecarclient.LockStatus{}, sidecarclient.ErrNotTryMode
		case "idle":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, sidecarclient.ErrNotHeld
		}
		return sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock
	}
	f.acquire = func(_ context.Context, id string, wait time.Duration) (sidecarclient.LockStatus, error) {
		check(id)
		if wait < 0 || wait > DefaultMaxWait {
			t.Errorf("service got wait %v outside [0, %v]", wait, DefaultMaxWait)
		}
		return answer(id)
	}
	checkToken := func(token int64) {
		if token < 0 {
			t.Errorf("service got token %d; tokens are positive, or 0 for none", token)
		}
	}
	// grant returns the pod's grant of id, if it holds one, refusing a token that names another.
	grant := func(id string, token int64) (sidecarclient.LockStatus, bool, error) {
		held := map[string]int64{"a": 1, "mine": 5}[id]
		switch {
		case held == 0:
			return sidecarclient.LockStatus{}, false, nil
		case token != 0 && token != held:
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: held}, true, sidecarclient.ErrTokenMismatch
		}
		return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateHeld, Token: held}, true, nil
	}
	f.yield = func(ctx context.Context, id string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
		check(id)
		checkToken(token)
		if st, ok, err := grant(id, token); ok {
			if err != nil {
				return st, err
			}
			return f.acquire(ctx, "a", wait) // granted again: a held lock with a new token
		}
		switch id {
		case "blocking": // Blocking mode: released, and queued again
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateWaiting, QueuePosition: 1, Reason: "yielded"}, nil
		case "busy", "acquiring", "idle":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, sidecarclient.ErrNotHeld
		}
		return answer(id)
	}
	f.release = func(_ context.Context, id string, token int64) (sidecarclient.LockStatus, error) {
		check(id)
		checkToken(token)
		if st, ok, err := grant(id, token); ok {
			if err != nil {
				return st, err
			}
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle, Token: st.Token}, nil
		}
		switch id {
		case "busy", "acquiring", "idle":
			return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, sidecarclient.ErrNotHeld
		}
		return answer(id) // blocking: not in Try mode; anything else: unknown
	}
	lock := f.lock
	f.lock = func(id string) (sidecarclient.LockStatus, bool) {
		check(id)
		return lock(id)
	}
	f.subscribe = func() (<-chan sidecarclient.Event, func()) {
		ch := make(chan sidecarclient.Event, 1)
		ch <- sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: "a", Token: 1}
		close(ch)
		return ch, func() {}
	}
	f.healthy = func(context.Context) error { return nil }
	f.ready = func() bool { return true }
	f.started = func() bool { return true }
	return f
}

// FuzzHandler sends arbitrary methods, request targets (path and query) and bodies through the
// handler. Every answer must be a JSON object with an expected status and Content-Type
// application/json (the event stream excepted), errors must say something, and nothing may panic
// or return 500. big prefixes the body with 1 MiB of whitespace to reach the size limit.
func FuzzHandler(f *testing.F) {
	seeds := []struct {
		method, target, body string
		big                  bool
	}{
		{"GET", "/v1/locks", "", false},
		{"HEAD", "/v1/locks", "", false},
		{"GET", "/v1/locks/a", "", false},
		{"GET", "/v1/locks/nope", "", false},
		{"GET", "/v1/locks/", "", false},
		{"GET", "/v1/locks/a%00b", "", false},
		{"GET", "/v1/locks/%FF%FE", "", false},
		{"GET", "/v1/locks/" + strings.Repeat("x", 257), "", false},
		{"POST", "/v1/locks/a/acquire", "", false},
		{"POST", "/v1/locks/a/yield", "", false},
		{"POST", "/v1/locks/busy/yield", `{"wait":"5s"}`, false},
		{"POST", "/v1/locks/a/acquire", `{"wait":"5s"}`, false},
		{"POST", "/v1/locks/a/acquire?wait=5s", "", false},
		{"POST", "/v1/locks/a/acquire?wait=5s", `{"wait":"5s"}`, false},
		{"POST", "/v1/locks/a/acquire?wait=-1s", "", false},
		{"POST", "/v1/locks/a/acquire?wait=11m", "", false},
		{"POST", "/v1/locks/a/acquire?wait=%zz", "", false},
		{"POST", "/v1/locks/a/acquire?wait=1s&wait=2s&x=1", "", false},
		{"POST", "/v1/locks/a/acquire", `{"wait":5}`, false},
		{"POST", "/v1/locks/a/acquire", `{"wait":"9223372036854775807ns"}`, false},
		{"POST", "/v1/locks/a/acquire", `{"wait":"1s","x":1}`, false},
		{"POST", "/v1/locks/a/acquire", `{"wait":`, false},
		{"POST", "/v1/locks/a/acquire", `{} []`, false},
		{"POST", "/v1/locks/a/acquire", `{"wait":"5s"}`, true},
		{"POST", "/v1/locks/busy/acquire", "", false},
		{"POST", "/v1/locks/blocking/acquire", "", false},
		{"POST", "/v1/locks//acquire", "", false},
		{"POST", "/v1/locks/a/release", "", false},
		{"POST", "/v1/locks/idle/release", "{}", false},
		{"POST", "/v1/locks/a/release", `{"force":true}`, false},
		{"POST", "/v1/locks/a/release", "{}", true},
		{"POST", "/v1/locks/a/release", `{"token":1}`, false},
		{"POST", "/v1/locks/a/release", `{"token":2}`, false},
		{"POST", "/v1/locks/a/release", `{"token":0}`, false},
		{"POST", "/v1/locks/a/release", `{"token":-9223372036854775808}`, false},
		{"POST", "/v1/locks/a/release", `{"token":9223372036854775808}`, false},
		{"POST", "/v1/locks/a/release", `{"token":1e3}`, false},
		{"POST", "/v1/locks/a/release", `{"token":"1"}`, false},
		{"POST", "/v1/locks/a/release", `{"token":null}`, false},
		{"POST", "/v1/locks/a/yield", `{"token":2,"wait":"1s"}`, false},
		{"POST", "/v1/locks/a/yield?wait=1s", `{"token":1}`, false},
		{"POST", "/v1/locks/acquiring/acquire", "", false},
		{"POST", "/v1/locks/mine/acquire", `{"wait":"1s"}`, false},
		{"POST", "/v1/locks/a/acquire", `{"token":1}`, false},
		{"POST", "/v1/locks/blocking/yield", "", false},
		{"POST", "/v1/locks/busy/release", "", false},
		{"POST", "/v1/locks/mine/release", `{"token":5}`, false},
		{"POST", "/v1/locks/mine/yield", `{"token":1}`, false},
		{"GET", "/v1/events", "", false},
		{"HEAD", "/v1/events", "", false},
		{"GET", "/healthz", "", false},
		{"HEAD", "/readyz", "", false},
		{"GET", "/startupz", "", false},
		{"DELETE", "/v1/locks/a", "", false},
		{"PATCH", "/healthz", "", false},
		{"CONNECT", "/v1/locks", "", false},
		{"OPTIONS", "*", "", false},
		{"GET", "/", "", false},
		{"GET", "/v1/../v1/locks", "", false},
		{"GET", "//v1//locks/a/", "", false},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, s.body, s.big)
	}
	f.Fuzz(func(t *testing.T, method, target, body string, big bool) {
		req, ok := fuzzRequest(method, target, body, big)
		if !ok {
			return // the server would reject this request line before any handler runs
		}
		h, err := newHandler(t, fuzzService(t))
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)

		res := rec.Result()
		ct := res.Header.Get("Content-Type")
		if req.Pattern == "GET /v1/events" && res.StatusCode == http.StatusOK {
			if ct != "text/event-stream" {
				t.Fatalf("%s %q: event stream Content-Type %q", method, target, ct)
			}
			checkSSE(t, rec.Body.Bytes())
			return
		}
		switch res.StatusCode {
		case 200, 400, 404, 405, 409, 413:
		default:
			t.Fatalf("%s %q body %q: status %d: %s", method, target, body, res.StatusCode, rec.Body)
		}
		if ct != "application/json" {
			t.Fatalf("%s %q: Content-Type %q, want application/json", method, target, ct)
		}
		var obj map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
			t.Fatalf("%s %q: body is not a JSON object: %v: %q", method, target, err, rec.Body)
		}
		if res.StatusCode >= 400 {
			if msg, _ := obj["error"].(string); len(msg) < 20 {
				t.Fatalf("%s %q: status %d with unhelpful error %q", method, target, res.StatusCode, msg)
			}
		}
		if res.StatusCode == 405 && res.Header.Get("Allow") == "" {
			t.Fatalf("%s %q: 405 without Allow", method, target)
		}
	})
}

// fuzzRequest builds the request a server would hand to the handler for this request line, or
// false if the server would refuse it first.
func fuzzRequest(method, target, body string, big bool) (*http.Request, bool) {
	if method == "" || strings.ContainsFunc(method, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r)
	}) {
		return nil, false
	}
	if strings.ContainsAny(target, " \r\n\x00") || target == "" {
		return nil, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, false
	}
	if big {
		body = strings.Repeat(" ", sidecarclient.MaxBodyBytes) + body
	}
	req := &http.Request{
		Method:     method,
		URL:        u,
		RequestURI: target,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{},
		Host:       "baton",
		Body:       io.NopCloser(strings.NewReader(body)),
	}
	req.ContentLength = int64(len(body))
	return req.WithContext(context.Background()), true
}

// checkSSE checks that b is well-framed Server-Sent Events whose data lines are Events.
func checkSSE(t *testing.T, b []byte) {
	t.Helper()
	if len(b) == 0 {
		return // HEAD
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "", strings.HasPrefix(line, ":"), strings.HasPrefix(line, "event: "):
		case strings.HasPrefix(line, "data: "):
			var ev sidecarclient.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
		default:
			t.Fatalf("unexpected event stream line %q", line)
		}
	}
}
