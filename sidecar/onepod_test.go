package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/internal/testing/testclock"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// apiAnswer is one answer of the sidecar's HTTP API.
type apiAnswer struct {
	status int
	body   string
	lock   sidecarclient.LockStatus // the answer's lock status (also inside error answers)
	code   string                   // error code, if any
}

// grant reports whether the answer hands the caller the lock: 200, state held, a token.
func (a apiAnswer) grant() bool {
	return a.status == http.StatusOK && a.lock.State == sidecarclient.StateHeld && a.lock.Token > 0
}

// post sends one POST through the real handler h.
func post(t *testing.T, h http.Handler, path, body string) apiAnswer {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	a := apiAnswer{status: rec.Code, body: rec.Body.String()}
	var eb sidecarclient.ErrorBody
	eb.LockStatus = &a.lock
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil {
		t.Fatalf("POST %s: answer is not JSON: %v: %s", path, err, rec.Body)
	}
	a.code = eb.Code
	return a
}

// tryPod returns a started Try-mode holder for pod name on mem and its API handler.
func tryPod(t *testing.T, mem *memstore.Store, seed uint64, name string, lockOpts ...lock.Option) (*Holder, http.Handler) {
	t.Helper()
	client := mem.Client(seed, memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 2 * time.Millisecond})
	h, err := NewHolder(testOptions(t, name, batonv1.ModeTry, "orders"), client, logr.Discard(), lockOpts...)
	if err != nil {
		t.Fatal(err)
	}
	h.Start(context.Background())
	t.Cleanup(func() { _ = h.Shutdown(context.Background()) })
	api, err := sidecarapi.NewHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	return h, api
}

// TestTryModeProcessesOfOnePod: several processes of one pod (two baton run jobs, an app and the
// CLI, an app that asks again after its HTTP client gave up) ask the sidecar's API for the same
// Try-mode lock. Only the one granted the lock gets a 200, always with state held and its token;
// the others get 409 saying why (another acquisition in progress, or the pod holds it for another
// process), and cannot release the grant with another token (issue 22, item 1).
func TestTryModeProcessesOfOnePod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		ctx := context.Background()
		a, api := tryPod(t, mem, 1, "a")
		b, _ := tryPod(t, mem, 2, "b")
		if _, err := b.Acquire(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}

		// The first process of pod a waits in the queue behind pod b.
		first := make(chan apiAnswer, 1)
		go func() { first <- post(t, api, "/v1/locks/orders/acquire", `{"wait":"1m"}`) }()
		for st, _ := a.Lock("orders"); st.State != sidecarclient.StateWaiting || st.Holder != "shop/b"; st, _ = a.Lock("orders") {
			time.Sleep(10 * time.Millisecond) // virtual time: until the first acquisition is queued
		}

		// A second process asks meanwhile, once and with a wait: never a 200 without the lock.
		for _, body := range []string{"", `{"wait":"5s"}`} {
			got := post(t, api, "/v1/locks/orders/acquire", body)
			if got.status == http.StatusOK {
				t.Errorf("second acquire (body %q) while the first waits: 200 without a grant: %s", body, got.body)
			}
			if got.status != http.StatusConflict || got.code != sidecarclient.CodeAcquiring ||
				!strings.Contains(got.body, "another acquisition of lock") {
				t.Errorf("second acquire (body %q) while the first waits: %d %s; want 409 %s", body, got.status, got.body, sidecarclient.CodeAcquiring)
			}
		}

		// Pod b releases: the first process is granted.
		if _, err := b.Release(ctx, "orders", 0); err != nil {
			t.Fatal(err)
		}
		granted := <-first
		if !granted.grant() {
			t.Fatalf("the first acquisition after b released: %d %s", granted.status, granted.body)
		}
		token := granted.lock.Token

		// A process that asks while the pod holds the lock for another is not granted it.
		if got := post(t, api, "/v1/locks/orders/acquire", ""); got.status != http.StatusConflict || got.code != sidecarclient.CodeHeldByPod {
			t.Errorf("acquire while the pod holds the lock for another process: %d %s; want 409 %s", got.status, got.body, sidecarclient.CodeHeldByPod)
		}

		// A release with another grant's token is refused, and the grant stays held.
		got := post(t, api, "/v1/locks/orders/release", fmt.Sprintf(`{"token":%d}`, token-1))
		if got.status != http.StatusConflict || got.code != sidecarclient.CodeTokenMismatch ||
			!strings.Contains(got.body, fmt.Sprint(token-1)) {
			t.Errorf("release with token %d while %d is held: %d %s; want 409 %s", token-1, token, got.status, got.body, sidecarclient.CodeTokenMismatch)
		}
		if st, _ := a.Lock("orders"); st.State != sidecarclient.StateHeld || st.Token != token {
			t.Errorf("after a refused release the sidecar reports %+v; want held with token %d", st, token)
		}
		if rec, err := lock.Inspect(ctx, mem.Client(9, memstore.Faults{}), a.opts.StoreLockID("orders")); err != nil ||
			!rec.Record.Held() || rec.Record.Token != token || rec.Record.Owner != a.locker.Owner().String() {
			t.Errorf("after a refused release the owner record is %+v (%v); want a's grant %d", rec.Record, err, token)
		}

		// The holder's own token releases it.
		if got := post(t, api, "/v1/locks/orders/release", fmt.Sprintf(`{"token":%d}`, token)); got.status != http.StatusOK || got.lock.State != sidecarclient.StateIdle {
			t.Errorf("release with the grant's token: %d %s", got.status, got.body)
		}
	})
}

// TestTryModeAcquireAfterDeadline: between a grant's self-fence deadline and the end of its lease
// (the lease's timer has not run yet, or the machine was just resumed), a new acquire is never
// answered 200 with the lost grant: it is granted anew or refused (issue 22, item 1).
func TestTryModeAcquireAfterDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		clk := &testclock.Ahead{}
		a, api := tryPod(t, mem, 1, "a", lock.WithClock(clk))
		first := post(t, api, "/v1/locks/orders/acquire", "")
		if !first.grant() {
			t.Fatalf("acquire of a free lock: %d %s", first.status, first.body)
		}
		clk.Set(3 * time.Second) // the deadline passed; the lease's timer has not run
		if st, _ := a.Lock("orders"); st.State != sidecarclient.StateLost {
			t.Fatalf("past the deadline the sidecar reports %+v", st)
		}
		got := post(t, api, "/v1/locks/orders/acquire", "")
		t.Logf("acquire past the deadline of grant %d: %d %s", first.lock.Token, got.status, got.body)
		switch {
		case got.status == http.StatusOK && !got.grant():
			t.Fatalf("acquire past the deadline: 200 without a grant: %s", got.body)
		case got.grant() && got.lock.Token <= first.lock.Token:
			t.Fatalf("acquire past the deadline answered the lost grant %d: %s", first.lock.Token, got.body)
		case !got.grant() && got.status != http.StatusConflict:
			t.Fatalf("acquire past the deadline: %d %s; want a new grant or 409", got.status, got.body)
		}
	})
}
