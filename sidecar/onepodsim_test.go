package sidecar

// The one-pod simulation (issue 22, item 8): seeded histories in virtual time of several processes
// of one pod, and of a second pod, using the sidecars' Try-mode API at once, through the real HTTP
// handler, on the in-memory store with latency and lost requests. Each process acts as holder only
// on an answer that grants it the lock (200, state held, a token), until it releases that grant by
// its token or learns that it ended; and now and then it asks again while it holds (a retry after
// its HTTP client gave up) or releases with another token (a stale one, or another process's).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/lock/memstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// onePodHistories: under the race detector a tenth of the default (see raceDetector; make test
// runs the full count again without it).
var onePodHistories = flag.Int("onepod.histories", defaultHistories(20), "seeded histories of the one-pod simulation (make soak runs 1000; 2 under -race)")

// defaultHistories is n, or a tenth of it under the race detector, which runs a history several
// times slower.
func defaultHistories(n int) int {
	if raceDetector {
		return max(1, n/10)
	}
	return n
}

// podClaim is one process acting as holder: from the answer that granted it the lock to the
// earlier of its release request and the lease's end as the sidecar last reported it.
type podClaim struct {
	pod, proc  string
	token      int64
	start, end time.Time
	how        string
}

// onePodHistory is what one simulated history produced.
type onePodHistory struct {
	claims   []podClaim
	problems []string // seen while it ran: answers the API must never give
	grants   int
	refused  int // acquires answered 409 while the pod held or acquired the lock
	released int // releases with a wrong token, all refused
}

// onePodSim is the shared state of one history.
type onePodSim struct {
	mu  sync.Mutex
	h   onePodHistory
	all map[string]int64 // open claims' tokens by pod/proc
}

func (s *onePodSim) problem(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.problems = append(s.h.problems, fmt.Sprintf(format, args...))
}

// simulateOnePod runs one history: pod a with three processes, pod b with two, for 30 s.
func simulateOnePod(t *testing.T, seed uint64, mut holderMutations) onePodHistory {
	var h onePodHistory
	synctest.Test(t, func(t *testing.T) {
		mem := memstore.New()
		master := rand.New(rand.NewPCG(seed, 1))
		faults := memstore.Faults{MinLatency: time.Millisecond, MaxLatency: 20 * time.Millisecond, DropRequest: 0.01, DropResponse: 0.01}
		sim := &onePodSim{all: map[string]int64{}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var holders []*Holder
		for _, pod := range []struct {
			name  string
			procs int
		}{{"a", 3}, {"b", 2}} {
			holder, err := NewHolder(testOptions(t, pod.name, batonv1.ModeTry, "orders"), mem.Client(master.Uint64(), faults), logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			holder.mutations = mut
			holder.Start(context.Background())
			holders = append(holders, holder)
			api, err := sidecarapi.NewHandler(holder)
			if err != nil {
				t.Fatal(err)
			}
			for i := range pod.procs {
				p := &podProcess{sim: sim, api: api, pod: pod.name, name: fmt.Sprintf("%s/%d", pod.name, i), rng: rand.New(rand.NewPCG(master.Uint64(), uint64(i)))}
				wg.Go(func() { p.run(ctx) })
			}
		}
		wg.Wait()
		for _, holder := range holders {
			_ = holder.Shutdown(context.Background())
		}
		time.Sleep(10 * time.Second) // leases given back; their goroutines end
		h = sim.h
	})
	return h
}

// podProcess is one process of a pod using the sidecar's API.
type podProcess struct {
	sim       *onePodSim
	api       http.Handler
	pod, name string
	rng       *rand.Rand
}

func (p *podProcess) dur(d time.Duration) time.Duration {
	return time.Duration(p.rng.Int64N(int64(d) + 1))
}

func (p *podProcess) run(ctx context.Context) {
	for ctx.Err() == nil {
		time.Sleep(p.dur(300 * time.Millisecond))
		switch r := p.rng.IntN(10); {
		case r < 7:
			body := ""
			if p.rng.IntN(2) == 0 {
				body = fmt.Sprintf(`{"wait":"%dms"}`, 1+p.rng.IntN(1500))
			}
			if a := p.call(ctx, "acquire", body); a.isGrant() {
				p.hold(ctx, a)
			}
		default:
			p.releaseOther(ctx)
		}
	}
}

// call sends one request through the real handler and checks what no answer may be.
func (p *podProcess) call(ctx context.Context, op, body string) answer {
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/locks/orders/"+op, strings.NewReader(body))
	rec := httptest.NewRecorder()
	p.api.ServeHTTP(rec, req)
	a := parseAnswer(rec)
	if op == "acquire" && a.status == http.StatusOK && !a.isGrant() {
		p.sim.problem("process %s: acquire answered 200 without a grant: %s", p.name, a.body)
	}
	return a
}

// hold acts as holder on grant a: it polls the lock's status, asks again now and then (a retry,
// which must not be a grant), and releases by its token.
func (p *podProcess) hold(ctx context.Context, a answer) {
	c := podClaim{pod: p.pod, proc: p.name, token: a.st.Token, start: time.Now()}
	validUntil := c.start.Add(time.Duration(a.st.LeaseRemainingMs) * time.Millisecond)
	p.open(c.token)
	defer p.close(&c)
	until := time.Now().Add(p.dur(1500 * time.Millisecond))
	for time.Now().Before(until) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		if time.Now().After(validUntil) {
			c.end, c.how = validUntil, "deadline passed unrenewed"
			return
		}
		st := p.status()
		if st.State != sidecarclient.StateHeld || st.Token != c.token {
			c.end, c.how = earlier(time.Now(), validUntil), "the sidecar no longer holds it: "+string(st.State)
			return
		}
		validUntil = time.Now().Add(time.Duration(st.LeaseRemainingMs) * time.Millisecond)
		if p.rng.IntN(8) == 0 {
			if again := p.call(ctx, "acquire", ""); again.isGrant() {
				// Two grants for one process: the second is a claim of its own.
				p.hold(ctx, again)
			} else {
				p.sim.mu.Lock()
				p.sim.h.refused++
				p.sim.mu.Unlock()
			}
		}
	}
	c.end, c.how = earlier(time.Now(), validUntil), "released"
	p.call(context.WithoutCancel(ctx), "release", fmt.Sprintf(`{"token":%d}`, c.token))
}

// releaseOther releases with a token that is not the pod's current grant's (a stale one, or
// another process's that has since been released): it must be refused.
func (p *podProcess) releaseOther(ctx context.Context) {
	st := p.status()
	if st.State != sidecarclient.StateHeld {
		return
	}
	wrong := st.Token - 1 - int64(p.rng.IntN(3))
	a := p.call(ctx, "release", fmt.Sprintf(`{"token":%d}`, wrong))
	p.sim.mu.Lock()
	defer p.sim.mu.Unlock()
	p.sim.h.released++
	if a.status == http.StatusOK {
		p.sim.h.problems = append(p.sim.h.problems, fmt.Sprintf("process %s released the pod's grant %d with token %d", p.name, st.Token, wrong))
	}
}

func (p *podProcess) status() sidecarclient.LockStatus {
	req := httptest.NewRequest(http.MethodGet, "/v1/locks/orders", nil)
	rec := httptest.NewRecorder()
	p.api.ServeHTTP(rec, req)
	return parseAnswer(rec).st
}

func (p *podProcess) open(token int64) {
	p.sim.mu.Lock()
	defer p.sim.mu.Unlock()
	p.sim.h.grants++
	p.sim.all[p.name] = token
}

func (p *podProcess) close(c *podClaim) {
	p.sim.mu.Lock()
	defer p.sim.mu.Unlock()
	delete(p.sim.all, p.name)
	p.sim.h.claims = append(p.sim.h.claims, *c)
}

// answer is one answer of the API.
type answer struct {
	status int
	body   string
	st     sidecarclient.LockStatus
}

func (a answer) isGrant() bool {
	return a.status == http.StatusOK && a.st.State == sidecarclient.StateHeld && a.st.Token > 0
}

func parseAnswer(rec *httptest.ResponseRecorder) answer {
	a := answer{status: rec.Code, body: rec.Body.String()}
	var eb sidecarclient.ErrorBody
	eb.LockStatus = &a.st
	_ = json.Unmarshal(rec.Body.Bytes(), &eb)
	return a
}

// checkOnePod verifies a history: no answer the API must never give, no two claims that overlap
// (in one pod or across the two), and tokens that grow from grant to grant.
func checkOnePod(h onePodHistory) []string {
	problems := slices.Clone(h.problems)
	claims := slices.Clone(h.claims)
	slices.SortFunc(claims, func(a, b podClaim) int { return a.start.Compare(b.start) })
	for i := 1; i < len(claims); i++ {
		for j := range i {
			a, b := claims[j], claims[i]
			if b.start.Before(a.end) {
				problems = append(problems, fmt.Sprintf("claims overlap by %v: process %s token %d (until %s) and process %s token %d",
					a.end.Sub(b.start), a.proc, a.token, a.how, b.proc, b.token))
			}
			if b.token < a.token || b.token == a.token && b.pod != a.pod {
				problems = append(problems, fmt.Sprintf("token %d of process %s after token %d of process %s", b.token, b.proc, a.token, a.proc))
			}
		}
	}
	return problems
}

// TestSimulationOnePod runs seeded one-pod histories and checks each.
func TestSimulationOnePod(t *testing.T) {
	var grants, refused, released int
	for i := range *onePodHistories {
		seed := uint64(1000 + i)
		h := simulateOnePod(t, seed, 0)
		if problems := checkOnePod(h); len(problems) > 0 {
			t.Fatalf("seed %d: %d problems, the first: %v", seed, len(problems), problems[:min(3, len(problems))])
		}
		if h.grants == 0 {
			t.Fatalf("seed %d: no grant in 30 s", seed)
		}
		grants, refused, released = grants+h.grants, refused+h.refused, released+h.released
	}
	fmt.Printf("simulation one-pod            %4d histories checked: %6d grants to processes of two pods, %5d acquires refused while the pod held, %5d releases with another token refused\n",
		*onePodHistories, grants, refused, released)
}

// TestSimulationOnePodCatchesMutants: each deliberately wrong variant of the holder's Try-mode API
// is caught within 20 histories.
func TestSimulationOnePodCatchesMutants(t *testing.T) {
	for _, m := range []struct {
		name string
		mut  holderMutations
	}{{"shared-grant", mutSharedGrant}, {"release-any-token", mutReleaseAnyToken}} {
		t.Run(m.name, func(t *testing.T) {
			for i := range 20 {
				if problems := checkOnePod(simulateOnePod(t, uint64(5000+i), m.mut)); len(problems) > 0 {
					fmt.Printf("simulation one-pod mutant %-18s caught after %2d histories: %s\n", m.name, i+1, clipText(problems[0], 110))
					return
				}
			}
			t.Fatalf("the variant %q survived 20 histories: the one-pod simulation cannot see it", m.name)
		})
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
