package sidecarapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// acquireWants returns an acquire func that checks the lock ID and wait it gets, then answers.
func acquireWants(t *testing.T, wantID string, wantWait time.Duration, st sidecarclient.LockStatus, err error) func(context.Context, string, time.Duration) (sidecarclient.LockStatus, error) {
	return func(_ context.Context, id string, wait time.Duration) (sidecarclient.LockStatus, error) {
		t.Helper()
		if id != wantID || wait != wantWait {
			t.Errorf("Acquire(%q, %v), want Acquire(%q, %v)", id, wait, wantID, wantWait)
		}
		return st, err
	}
}

// releaseWants returns a release func that checks the lock ID and token it gets, then answers.
func releaseWants(t *testing.T, wantID string, wantToken int64, st sidecarclient.LockStatus, err error) func(context.Context, string, int64) (sidecarclient.LockStatus, error) {
	return func(_ context.Context, id string, token int64) (sidecarclient.LockStatus, error) {
		t.Helper()
		if id != wantID || token != wantToken {
			t.Errorf("Release(%q, %d), want Release(%q, %d)", id, token, wantID, wantToken)
		}
		return st, err
	}
}

// yieldWants returns a yield func that checks the lock ID, token and wait it gets, then answers.
func yieldWants(t *testing.T, wantID string, wantToken int64, wantWait time.Duration, st sidecarclient.LockStatus, err error) func(context.Context, string, int64, time.Duration) (sidecarclient.LockStatus, error) {
	return func(_ context.Context, id string, token int64, wait time.Duration) (sidecarclient.LockStatus, error) {
		t.Helper()
		if id != wantID || token != wantToken || wait != wantWait {
			t.Errorf("Yield(%q, %d, %v), want Yield(%q, %d, %v)", id, token, wait, wantID, wantToken, wantWait)
		}
		return st, err
	}
}

func TestHandlerRoutes(t *testing.T) {
	held := sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateHeld, Token: 8, LeaseRemainingMs: 10000}
	lockedStatus := sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateWaiting, Holder: "ns/other", QueuePosition: 1}
	idle := sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateIdle}
	bigBody := `{"wait":"5s"}` + strings.Repeat(" ", sidecarclient.MaxBodyBytes)
	long := strings.Repeat("x", maxLockIDBytes)

	tests := []struct {
		name    string
		method  string
		target  string
		body    string
		ctx     func() context.Context // request context; default background
		setup   func(t *testing.T, f *fakeService)
		status  int
		contain []string // substrings of the body
		allow   string   // want Allow header
	}{
		// GET /v1/locks
		{name: "list", method: "GET", target: "/v1/locks", setup: func(_ *testing.T, f *fakeService) { withDeclared(f) },
			status: 200, contain: []string{`{"locks":[{"lockId":"a","state":"held","token":7,"holder":"ns/me","leaseRemainingMs":9000}`, `"queuePosition":2`}},
		{name: "list empty is []", method: "GET", target: "/v1/locks", setup: func(_ *testing.T, f *fakeService) { f.locks = func() []sidecarclient.LockStatus { return nil } },
			status: 200, contain: []string{`{"locks":[]}`}},
		{name: "list HEAD", method: "HEAD", target: "/v1/locks", setup: func(_ *testing.T, f *fakeService) { withDeclared(f) }, status: 200},
		{name: "list ignores query", method: "GET", target: "/v1/locks?x=1", setup: func(_ *testing.T, f *fakeService) { withDeclared(f) }, status: 200},
		{name: "list POST", method: "POST", target: "/v1/locks", status: 405, allow: "GET, HEAD", contain: []string{`method \"POST\" is not allowed`, "GET, HEAD"}},
		{name: "list trailing slash", method: "GET", target: "/v1/locks/", status: 400, contain: []string{"must not be empty"}},

		// GET /v1/locks/{lockID}
		{name: "get", method: "GET", target: "/v1/locks/a", setup: func(_ *testing.T, f *fakeService) { withDeclared(f) },
			status: 200, contain: []string{`"lockId":"a"`, `"token":7`}},
		{name: "get unknown", method: "GET", target: "/v1/locks/nope", setup: func(_ *testing.T, f *fakeService) { withDeclared(f) },
			status: 404, contain: []string{`lock \"nope\" is not declared`, `declared: \"a\", \"b\", \"c\"`, `"code":"unknown_lock"`}},
		{name: "get unknown none declared", method: "GET", target: "/v1/locks/nope", setup: func(_ *testing.T, f *fakeService) {
			f.locks = func() []sidecarclient.LockStatus { return nil }
			f.lock = func(string) (sidecarclient.LockStatus, bool) { return sidecarclient.LockStatus{}, false }
		}, status: 404, contain: []string{"declared: none"}},
		{name: "get escaped slash", method: "GET", target: "/v1/locks/a%2Fb", setup: func(t *testing.T, f *fakeService) {
			f.lock = func(id string) (sidecarclient.LockStatus, bool) {
				if id != "a/b" {
					t.Errorf("Lock(%q), want a/b", id)
				}
				return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, true
			}
		}, status: 200, contain: []string{`"lockId":"a/b"`}},
		{name: "get 256 bytes ok", method: "GET", target: "/v1/locks/" + long, setup: func(_ *testing.T, f *fakeService) {
			f.lock = func(id string) (sidecarclient.LockStatus, bool) {
				return sidecarclient.LockStatus{LockID: id, State: sidecarclient.StateIdle}, true
			}
		}, status: 200},
		{name: "get 257 bytes", method: "GET", target: "/v1/locks/" + long + "x", status: 400, contain: []string{"257 bytes long", "at most 256 bytes"}},
		{name: "get NUL", method: "GET", target: "/v1/locks/a%00b", status: 400, contain: []string{"control characters"}},
		{name: "get newline", method: "GET", target: "/v1/locks/a%0Ab", status: 400, contain: []string{"control characters"}},
		{name: "get DEL", method: "GET", target: "/v1/locks/a%7Fb", status: 400, contain: []string{"control characters"}},
		{name: "get C1 control", method: "GET", target: "/v1/locks/a%C2%85b", status: 400, contain: []string{"control characters"}},
		{name: "get invalid UTF-8", method: "GET", target: "/v1/locks/%FF", status: 400, contain: []string{"not valid UTF-8"}},
		{name: "get DELETE", method: "DELETE", target: "/v1/locks/a", status: 405, allow: "GET, HEAD", contain: []string{"use GET, HEAD"}},
		{name: "get extra segment", method: "GET", target: "/v1/locks/a/b", status: 404, contain: []string{"no route for GET", "POST /v1/locks/{lockID}/acquire"}},

		// POST /v1/locks/{lockID}/acquire
		{name: "acquire try once", method: "POST", target: "/v1/locks/a/acquire",
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 0, held, nil) },
			status: 200, contain: []string{`"state":"held"`, `"token":8`}},
		{name: "acquire body wait", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":"5s"}`,
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 5*time.Second, held, nil) },
			status: 200},
		{name: "acquire body wait zero", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":"0s"}`,
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 0, held, nil) },
			status: 200},
		{name: "acquire empty object", method: "POST", target: "/v1/locks/a/acquire", body: " {} \n",
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 0, held, nil) },
			status: 200},
		{name: "acquire null body", method: "POST", target: "/v1/locks/a/acquire", body: "null",
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 0, held, nil) },
			status: 200},
		{name: "acquire query wait", method: "POST", target: "/v1/locks/a/acquire?wait=1m30s",
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 90*time.Second, held, nil) },
			status: 200},
		{name: "acquire max wait", method: "POST", target: "/v1/locks/a/acquire?wait=10m",
			setup:  func(t *testing.T, f *fakeService) { f.acquire = acquireWants(t, "a", 10*time.Minute, held, nil) },
			status: 200},
		{name: "acquire over max wait", method: "POST", target: "/v1/locks/a/acquire?wait=10m1s", status: 400,
			contain: []string{`query parameter wait is \"10m1s\"`, "from 0s to 10m0s"}},
		{name: "acquire negative wait", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":"-1s"}`, status: 400,
			contain: []string{`body field \"wait\" is \"-1s\"`, "from 0s to 10m0s"}},
		{name: "acquire unparsable wait", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":"soon"}`, status: 400,
			contain: []string{`\"soon\"`, "Go duration"}},
		{name: "acquire empty wait", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":""}`, status: 400,
			contain: []string{"Go duration"}},
		{name: "acquire numeric wait", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":5}`, status: 400,
			contain: []string{`field \"wait\" must be a string`, "got a JSON number"}},
		{name: "acquire array body", method: "POST", target: "/v1/locks/a/acquire", body: `["5s"]`, status: 400,
			contain: []string{"must be a JSON object", `{\"wait\":\"5s\"}`}},
		{name: "acquire truncated JSON", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":`, status: 400,
			contain: []string{"truncated JSON"}},
		{name: "acquire malformed JSON", method: "POST", target: "/v1/locks/a/acquire", body: `{wait: 5s}`, status: 400,
			contain: []string{"not valid JSON", "at byte"}},
		{name: "acquire unknown field", method: "POST", target: "/v1/locks/a/acquire", body: `{"wait":"1s","timeout":"2s"}`, status: 400,
			contain: []string{`unknown field \"timeout\"`, `the only field is \"wait\"`}},
		{name: "acquire trailing data", method: "POST", target: "/v1/locks/a/acquire", body: `{} {}`, status: 400,
			contain: []string{"data after the JSON object"}},
		{name: "acquire body too large", method: "POST", target: "/v1/locks/a/acquire", body: bigBody, status: 413,
			contain: []string{"larger than 1048576 bytes", `"code":"too_large"`}},
		{name: "acquire wait twice", method: "POST", target: "/v1/locks/a/acquire?wait=1s", body: `{"wait":"1s"}`, status: 400,
			contain: []string{"both in the query and in the body"}},
		{name: "acquire repeated query", method: "POST", target: "/v1/locks/a/acquire?wait=1s&wait=2s", status: 400,
			contain: []string{"given 2 times"}},
		{name: "acquire unknown query", method: "POST", target: "/v1/locks/a/acquire?timeout=1s", status: 400,
			contain: []string{`unknown query parameter \"timeout\"`}},
		{name: "acquire malformed query", method: "POST", target: "/v1/locks/a/acquire?wait=%zz", status: 400,
			contain: []string{"malformed query string"}},
		{name: "acquire locked", method: "POST", target: "/v1/locks/a/acquire?wait=2s",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 2*time.Second, lockedStatus, sidecarclient.ErrLocked)
			},
			status: 409, contain: []string{`"code":"locked"`, `held elsewhere by ns/other`, `"lockId":"a"`, `"state":"waiting"`, `"holder":"ns/other"`, `"queuePosition":1`}},
		{name: "acquire locked wrapped", method: "POST", target: "/v1/locks/a/acquire",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 0, sidecarclient.LockStatus{}, fmt.Errorf("%w: queue is 3 deep", sidecarclient.ErrLocked))
			},
			status: 409, contain: []string{`"code":"locked"`, "queue is 3 deep"}},
		{name: "acquire not try mode", method: "POST", target: "/v1/locks/a/acquire",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 0, sidecarclient.LockStatus{}, sidecarclient.ErrNotTryMode)
			},
			status: 409, contain: []string{`"code":"not_try_mode"`, "not in Try mode"}},
		{name: "acquire while another is in progress", method: "POST", target: "/v1/locks/a/acquire?wait=5s",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 5*time.Second, lockedStatus, fmt.Errorf("%w: another request of this pod is acquiring a", sidecarclient.ErrAcquiring))
			},
			status: 409, contain: []string{`"code":"acquiring"`, `another acquisition of lock \"a\" is in progress in this pod`,
				"nothing was granted to this request", `"state":"waiting"`}},
		{name: "acquire held by the pod", method: "POST", target: "/v1/locks/a/acquire",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 0, held, fmt.Errorf("%w: a is held with token 8", sidecarclient.ErrHeldByPod))
			},
			status: 409, contain: []string{`"code":"held_by_pod"`, `already held by this pod (token 8) for the process that acquired it`, "not granted twice"}},
		{name: "acquire token field", method: "POST", target: "/v1/locks/a/acquire", body: `{"token":8}`, status: 400,
			contain: []string{`unknown field \"token\"`, `the only field is \"wait\"`}},
		{name: "acquire shutting down", method: "POST", target: "/v1/locks/a/acquire?wait=1m",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", time.Minute, sidecarclient.LockStatus{}, fmt.Errorf("%w: stopped waiting for a", sidecarclient.ErrShuttingDown))
			},
			status: 503, contain: []string{`"code":"shutting_down"`, "shutting down (SIGTERM)", "stopped waiting"}},
		{name: "acquire unknown lock", method: "POST", target: "/v1/locks/zz/acquire",
			setup: func(t *testing.T, f *fakeService) {
				withDeclared(f)
				f.acquire = acquireWants(t, "zz", 0, sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock)
			},
			status: 404, contain: []string{`lock \"zz\" is not declared`}},
		{name: "acquire answered without a grant", method: "POST", target: "/v1/locks/a/acquire",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 0, lockedStatus, nil)
			},
			status: 500, contain: []string{`"code":"internal"`, `answered state \"waiting\" with token 0, which grants nothing`}},
		{name: "acquire store failure", method: "POST", target: "/v1/locks/a/acquire",
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = acquireWants(t, "a", 0, sidecarclient.LockStatus{}, errors.New("cassandra: no hosts available"))
			},
			status: 500, contain: []string{"no hosts available", `"code":"internal"`}},
		{name: "acquire cancelled", method: "POST", target: "/v1/locks/a/acquire?wait=1m",
			ctx: func() context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			},
			setup: func(t *testing.T, f *fakeService) {
				f.acquire = func(ctx context.Context, _ string, _ time.Duration) (sidecarclient.LockStatus, error) {
					<-ctx.Done()
					return sidecarclient.LockStatus{}, ctx.Err()
				}
			},
			status: 503, contain: []string{"cancelled because the request ended"}},
		{name: "acquire panics", method: "POST", target: "/v1/locks/a/acquire",
			setup: func(_ *testing.T, f *fakeService) {
				f.acquire = func(context.Context, string, time.Duration) (sidecarclient.LockStatus, error) { panic("boom") }
			},
			status: 500, contain: []string{"internal error"}},
		{name: "acquire empty ID", method: "POST", target: "/v1/locks//acquire", status: 400, contain: []string{"must not be empty"}},
		{name: "acquire bad ID", method: "POST", target: "/v1/locks/a%01/acquire", status: 400, contain: []string{"control characters"}},
		{name: "acquire GET", method: "GET", target: "/v1/locks/a/acquire", status: 405, allow: "POST", contain: []string{"use POST"}},

		// POST /v1/locks/{lockID}/yield
		{name: "yield", method: "POST", target: "/v1/locks/a/yield",
			setup: func(t *testing.T, f *fakeService) {
				f.yield = yieldWants(t, "a", 0, 0, sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateWaiting, Reason: "yielded"}, nil)
			},
			status: 200, contain: []string{`"state":"waiting"`, `"reason":"yielded"`}},
		{name: "yield with a wait", method: "POST", target: "/v1/locks/a/yield", body: `{"wait":"30s"}`,
			setup: func(t *testing.T, f *fakeService) {
				f.yield = yieldWants(t, "a", 0, 30*time.Second, sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateHeld, Token: 9}, nil)
			},
			status: 200, contain: []string{`"state":"held"`, `"token":9`}},
		{name: "yield with a token and a wait", method: "POST", target: "/v1/locks/a/yield?wait=30s", body: `{"token":8}`,
			setup: func(t *testing.T, f *fakeService) {
				f.yield = yieldWants(t, "a", 8, 30*time.Second, sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateHeld, Token: 9}, nil)
			},
			status: 200, contain: []string{`"token":9`}},
		{name: "yield another grant", method: "POST", target: "/v1/locks/a/yield", body: `{"token":7}`,
			setup: func(t *testing.T, f *fakeService) {
				f.yield = yieldWants(t, "a", 7, 0, held, fmt.Errorf("%w: this pod holds a with token 8, not 7", sidecarclient.ErrTokenMismatch))
			},
			status: 409, contain: []string{`"code":"token_mismatch"`, "did not yield it", "not 7", `"token":8`}},
		{name: "yield zero token", method: "POST", target: "/v1/locks/a/yield", body: `{"token":0}`, status: 400,
			contain: []string{`body field \"token\" is 0`, "positive integer"}},
		{name: "yield not held", method: "POST", target: "/v1/locks/a/yield",
			setup: func(t *testing.T, f *fakeService) {
				f.yield = yieldWants(t, "a", 0, 0, sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateWaiting}, sidecarclient.ErrNotHeld)
			},
			status: 409, contain: []string{`"code":"not_held"`, "nothing to yield"}},
		{name: "yield bad wait", method: "POST", target: "/v1/locks/a/yield?wait=soon", status: 400, contain: []string{"wait"}},
		{name: "yield unknown field", method: "POST", target: "/v1/locks/a/yield", body: `{"force":true}`, status: 400,
			contain: []string{`unknown field \"force\"`, `\"wait\"`, `\"token\"`}},
		{name: "yield GET", method: "GET", target: "/v1/locks/a/yield", status: 405, allow: "POST", contain: []string{"use POST"}},

		// POST /v1/locks/{lockID}/release
		{name: "release", method: "POST", target: "/v1/locks/a/release",
			setup:  func(t *testing.T, f *fakeService) { f.release = releaseWants(t, "a", 0, idle, nil) },
			status: 200, contain: []string{`"state":"idle"`}},
		{name: "release empty object", method: "POST", target: "/v1/locks/a/release", body: "{}",
			setup:  func(t *testing.T, f *fakeService) { f.release = releaseWants(t, "a", 0, idle, nil) },
			status: 200},
		{name: "release with its token", method: "POST", target: "/v1/locks/a/release", body: `{"token":1795419806766942}`,
			setup:  func(t *testing.T, f *fakeService) { f.release = releaseWants(t, "a", 1795419806766942, idle, nil) },
			status: 200, contain: []string{`"state":"idle"`}},
		{name: "release another grant", method: "POST", target: "/v1/locks/a/release", body: `{"token":7}`,
			setup: func(t *testing.T, f *fakeService) {
				f.release = releaseWants(t, "a", 7, held, fmt.Errorf("%w: this pod holds a with token 8, not 7", sidecarclient.ErrTokenMismatch))
			},
			status: 409, contain: []string{`"code":"token_mismatch"`, `lock \"a\" is not held with the token given: did not release it`, "not 7", `"state":"held"`, `"token":8`}},
		{name: "release zero token", method: "POST", target: "/v1/locks/a/release", body: `{"token":0}`, status: 400,
			contain: []string{`body field \"token\" is 0`, "positive integer"}},
		{name: "release negative token", method: "POST", target: "/v1/locks/a/release", body: `{"token":-3}`, status: 400,
			contain: []string{`is -3`}},
		{name: "release fractional token", method: "POST", target: "/v1/locks/a/release", body: `{"token":1.5}`, status: 400,
			contain: []string{`field \"token\" must be an integer (a fencing token`}},
		{name: "release string token", method: "POST", target: "/v1/locks/a/release", body: `{"token":"8"}`, status: 400,
			contain: []string{`field \"token\" must be an integer`, "got a JSON string"}},
		{name: "release unknown field", method: "POST", target: "/v1/locks/a/release", body: `{"force":true}`, status: 400,
			contain: []string{`unknown field \"force\"`, `the only field is \"token\"`}},
		{name: "release malformed", method: "POST", target: "/v1/locks/a/release", body: `{`, status: 400, contain: []string{"truncated"}},
		{name: "release too large", method: "POST", target: "/v1/locks/a/release", body: "{}" + strings.Repeat("\n", sidecarclient.MaxBodyBytes), status: 413},
		{name: "release not held", method: "POST", target: "/v1/locks/a/release",
			setup: func(t *testing.T, f *fakeService) {
				f.release = releaseWants(t, "a", 0, idle, sidecarclient.ErrNotHeld)
			},
			status: 409, contain: []string{`"code":"not_held"`, "nothing to release", `"state":"idle"`}},
		{name: "release not try mode", method: "POST", target: "/v1/locks/a/release",
			setup: func(t *testing.T, f *fakeService) {
				f.release = releaseWants(t, "a", 0, sidecarclient.LockStatus{}, sidecarclient.ErrNotTryMode)
			},
			status: 409, contain: []string{"not in Try mode", "cannot release"}},
		{name: "release unknown", method: "POST", target: "/v1/locks/q/release",
			setup: func(t *testing.T, f *fakeService) {
				withDeclared(f)
				f.release = releaseWants(t, "q", 0, sidecarclient.LockStatus{}, sidecarclient.ErrUnknownLock)
			},
			status: 404, contain: []string{"not declared"}},
		{name: "release bad ID", method: "POST", target: "/v1/locks/" + long + "y/release", status: 400, contain: []string{"at most 256 bytes"}},
		{name: "release PUT", method: "PUT", target: "/v1/locks/a/release", status: 405, allow: "POST"},

		// GET /v1/events (non-streaming cases; streaming is in events_test.go)
		{name: "events POST", method: "POST", target: "/v1/events", status: 405, allow: "GET, HEAD"},

		// probes
		{name: "healthz ok", method: "GET", target: "/healthz", setup: func(_ *testing.T, f *fakeService) { f.healthy = func(context.Context) error { return nil } },
			status: 200, contain: []string{`{"status":"ok"}`}},
		{name: "healthz HEAD", method: "HEAD", target: "/healthz", setup: func(_ *testing.T, f *fakeService) { f.healthy = func(context.Context) error { return nil } },
			status: 200},
		{name: "healthz down", method: "GET", target: "/healthz", setup: func(_ *testing.T, f *fakeService) {
			f.healthy = func(context.Context) error { return errors.New("lock store unreachable: dial 10.0.0.1:9042: timeout") }
		}, status: 503, contain: []string{`"status":"unhealthy"`, "lock store unreachable"}},
		{name: "healthz POST", method: "POST", target: "/healthz", status: 405, allow: "GET, HEAD"},
		{name: "readyz ready", method: "GET", target: "/readyz", setup: func(_ *testing.T, f *fakeService) {
			withDeclared(f)
			f.ready = func() bool { return true }
		}, status: 200, contain: []string{`"status":"ready"`, `"locks":[{"lockId":"a"`}},
		{name: "readyz not ready", method: "GET", target: "/readyz", setup: func(_ *testing.T, f *fakeService) {
			withDeclared(f)
			f.ready = func() bool { return false }
		}, status: 503, contain: []string{`"status":"not ready"`, `"state":"waiting"`}},
		{name: "readyz HEAD", method: "HEAD", target: "/readyz", setup: func(_ *testing.T, f *fakeService) {
			withDeclared(f)
			f.ready = func() bool { return false }
		}, status: 503},
		{name: "startupz started", method: "GET", target: "/startupz", setup: func(_ *testing.T, f *fakeService) { f.started = func() bool { return true } },
			status: 200, contain: []string{`"status":"started"`}},
		{name: "startupz starting", method: "GET", target: "/startupz", setup: func(_ *testing.T, f *fakeService) { f.started = func() bool { return false } },
			status: 503, contain: []string{`"status":"starting"`}},
		{name: "startupz HEAD", method: "HEAD", target: "/startupz", setup: func(_ *testing.T, f *fakeService) { f.started = func() bool { return true } },
			status: 200},
		{name: "startupz DELETE", method: "DELETE", target: "/startupz", status: 405, allow: "GET, HEAD"},

		// unknown routes
		{name: "root", method: "GET", target: "/", status: 404, contain: []string{`no route for GET \"/\"`, "GET /v1/locks"}},
		{name: "other version", method: "GET", target: "/v2/locks", status: 404, contain: []string{"no route"}},
		{name: "unknown POST", method: "POST", target: "/v1/lock/a/acquire", status: 404, contain: []string{"no route"}},
		{name: "non-canonical", method: "GET", target: "/v1/../healthz", status: 404, contain: []string{"not canonical", `did you mean \"/healthz\"`}},
		{name: "double slash", method: "GET", target: "//v1/locks", status: 404, contain: []string{"not canonical", `\"/v1/locks\"`}},
		{name: "asterisk target", method: "OPTIONS", target: "*", status: 400, contain: []string{"malformed request target"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeService{t: t}
			if tc.setup != nil {
				tc.setup(t, f)
			}
			h, err := newHandler(t, f)
			if err != nil {
				t.Fatal(err)
			}
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req := httptest.NewRequest(tc.method, "http://baton/", body)
			if tc.target == "*" {
				req.URL.Path, req.RequestURI = "*", "*"
			} else {
				req = httptest.NewRequest(tc.method, tc.target, body)
			}
			if tc.ctx != nil {
				req = req.WithContext(tc.ctx())
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			res := rec.Result()
			if res.StatusCode != tc.status {
				t.Errorf("status %d, want %d; body %s", res.StatusCode, tc.status, rec.Body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if got := res.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			if res.Header.Get("Location") != "" {
				t.Errorf("unexpected Location header %q", res.Header.Get("Location"))
			}
			var obj map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil {
				t.Fatalf("body is not a JSON object: %v: %s", err, rec.Body)
			}
			if tc.status >= 400 && tc.status != http.StatusServiceUnavailable || tc.name == "acquire cancelled" {
				msg, _ := obj["error"].(string)
				if len(msg) < 20 {
					t.Errorf("error message %q is missing or too short to help", msg)
				}
				if code, _ := obj["code"].(string); code == "" {
					t.Errorf("error answer has no code: %s", rec.Body)
				}
			}
			for _, s := range tc.contain {
				if !strings.Contains(rec.Body.String(), s) {
					t.Errorf("body does not contain %s:\n%s", s, rec.Body)
				}
			}
		})
	}
}

func TestNewHandlerValidates(t *testing.T) {
	f := &fakeService{t: t}
	tests := []struct {
		name string
		svc  Service
		opts []Option
		want string
	}{
		{"nil service", nil, nil, "needs a Service"},
		{"nil option", f, []Option{nil}, "nil Option"},
		{"zero keep-alive", f, []Option{WithKeepAlive(0)}, "keep-alive interval must be positive"},
		{"negative keep-alive", f, []Option{WithKeepAlive(-time.Second)}, "keep-alive interval must be positive"},
		{"negative max wait", f, []Option{WithMaxWait(-time.Second)}, "max wait must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := newHandler(t, tc.svc, tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewHandler: (%v, %v), want error containing %q", h, err, tc.want)
			}
		})
	}
}

func TestWithMaxWait(t *testing.T) {
	f := &fakeService{t: t}
	f.acquire = acquireWants(t, "a", 0, sidecarclient.LockStatus{LockID: "a", State: sidecarclient.StateHeld, Token: 1}, nil)
	h, err := newHandler(t, f, WithMaxWait(0))
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]int{
		"/v1/locks/a/acquire?wait=0s": 200,
		"/v1/locks/a/acquire?wait=1s": 400,
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", target, nil))
		if rec.Code != want {
			t.Errorf("POST %s: status %d, want %d: %s", target, rec.Code, want, rec.Body)
		}
		if want == 400 && !strings.Contains(rec.Body.String(), "from 0s to 0s") {
			t.Errorf("POST %s: error does not state the bound: %s", target, rec.Body)
		}
	}
}
