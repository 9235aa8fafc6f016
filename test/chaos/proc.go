//go:build linux

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// podNamespace is the sidecars' namespace; it prefixes the lock's ID in the store.
const podNamespace = "chaos"

// Each process i has its own loopback address 127.0.3.i+1 (its pod IP): hintPort is where it
// takes hand-off hints, metricsPort where a sidecar serves its metrics. Own addresses keep a
// restart from finding its port taken by someone's ephemeral port.
const (
	hintPort    = 18450
	metricsPort = 18451
)

// proc is one sidecar process and its app.
type proc struct {
	run     *run
	name    string
	index   int
	socket  string
	uid     int    // the process's own user, for the partition class (0: the harness's user)
	metrics string // host:port of the sidecar's metrics

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	expected  bool // the nemesis ended it: its exit is no crash
	graceful  bool // ended by SIGTERM: it must exit 0
	started   time.Time
	clockSkew int64 // monotonic offset of its time namespace, in seconds (0: the machine's)
	token     int64
	open      bool          // a hold of token was reported and not reported ended
	holding   bool          // the app believes it holds token: it writes with it
	holdInc   int           // the incarnation that reported the hold
	holdIdx   map[int64]int // token → index in run.holds, so each grant is recorded once
	streamInc int           // the incarnation whose event stream the app follows now; 0 while none
	streamSet chan struct{} // closed (and replaced) when streamInc changes
	usage     []usage       // this incarnation's samples of its metrics
	inc       int           // incarnation: 1 for the first start, +1 per restart
	exits     map[int]exit  // by incarnation
	rng       *rand.Rand    // its app's choices
	next      int64         // WorkloadRun: the monotonic offset of the next start
}

// exit is how one incarnation of a sidecar ended.
type exit struct {
	at       time.Time
	graceful bool // after SIGTERM
}

// usage is one sample of a sidecar's own metrics.
type usage struct {
	at         time.Time
	goroutines float64
	rss        float64 // bytes
}

// start starts the process: a sidecar under the same pod identity (a restart is a zero-wait
// restart), or for the run workload `baton run` with the writer as its command. With
// monotonicOffset > 0 it runs in a time namespace of its own whose monotonic and boot clocks are
// that many seconds ahead of the machine's.
func (p *proc) start(monotonicOffset int64) error {
	cfg := p.run.cfg
	p.run.startMu.Lock()
	defer p.run.startMu.Unlock()
	if p.run.over {
		return errRunOver
	}
	program, args, env := p.sidecarCommand()
	if cfg.Workload == WorkloadRun {
		program, args, env = p.runnerCommand()
	}
	var cmd *exec.Cmd
	if monotonicOffset > 0 {
		off := strconv.FormatInt(monotonicOffset, 10)
		ns := []string{"--time", "--monotonic", off, "--boottime", off}
		if p.uid > 0 {
			id := strconv.Itoa(p.uid)
			ns = append(ns, "--setuid", id, "--setgid", id)
		}
		cmd = exec.Command("unshare", append(append(ns, "--", program), args...)...) // unshare execs it: same pid
	} else {
		cmd = exec.Command(program, args...)
		if p.uid > 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.uid)}}
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL // never outlive the harness
	cmd.Env = append(os.Environ(), env...)
	var out io.Writer = io.Discard
	if cfg.Output != nil {
		out = cfg.Output(p.name)
	}
	var logs *os.File // baton run's log, which reports its holds
	if cfg.Workload == WorkloadRun {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("chaos: a pipe for %s's log: %w", p.name, err)
		}
		logs, cmd.Stderr = r, w
		defer w.Close() // the children hold their own ends
	} else {
		cmd.Stderr = out
	}
	if err := cmd.Start(); err != nil {
		if logs != nil {
			logs.Close()
		}
		return fmt.Errorf("chaos: starting %s (%s): %w", p.name, program, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.run.addUsage(p.name, p.usage) // the last incarnation's
	p.cmd, p.exited, p.expected, p.graceful = cmd, exited, false, false
	p.started, p.clockSkew, p.usage = time.Now(), monotonicOffset, nil
	p.inc++
	inc := p.inc
	p.mu.Unlock()
	if logs != nil {
		go p.followRunner(logs, out, inc, exited)
	}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		expected, graceful := p.expected || p.runnerExitOK(err), p.graceful && p.run.cfg.Workload != WorkloadRun
		if p.exits == nil {
			p.exits = map[int]exit{}
		}
		p.exits[inc] = exit{at: time.Now(), graceful: graceful}
		p.mu.Unlock()
		switch {
		case !expected:
			p.run.crash(fmt.Sprintf("%s exited by itself: %v", p.name, err))
		case graceful && err != nil:
			p.run.crash(fmt.Sprintf("%s did not exit cleanly after SIGTERM: %v", p.name, err))
		}
		close(exited)
	}()
	return nil
}

// sidecarCommand is the sidecar's command line and environment.
func (p *proc) sidecarCommand() (program string, args, env []string) {
	cfg := p.run.cfg
	mode := "Blocking"
	if cfg.Workload == WorkloadCycle {
		mode = "Try"
	}
	return cfg.Binary, nil, []string{
		"BATON_LOCK_IDS=" + cfg.Lock, "BATON_MODE=" + mode, "BATON_TRAFFIC_POLICY=None",
		"BATON_LEASE=" + cfg.Lease.String(), "BATON_SHUTDOWN_TIMEOUT=5s",
		"BATON_CASSANDRA_HOSTS=" + strings.Join(cfg.Hosts, ","), "BATON_CASSANDRA_KEYSPACE=" + cfg.Keyspace,
		"POD_NAMESPACE=" + podNamespace, "POD_NAME=" + p.name, "POD_UID=uid-" + p.name,
		fmt.Sprintf("POD_IP=127.0.3.%d", p.index+1), fmt.Sprintf("BATON_HINT_PORT=%d", hintPort),
		"BATON_HINT_ALLOW_LOOPBACK=true", // every "pod" of the run is a loopback address of this host
		"BATON_SOCKET=" + p.socket, "BATON_METRICS_ADDR=" + p.metrics,
	}
}

// startAgain starts p again after the nemesis stopped it; in the run workload it leaves that to
// runLoop, which starts baton run again after each exit, and only says with what clock.
func (p *proc) startAgain(monotonicOffset int64) error {
	if p.run.cfg.Workload == WorkloadRun {
		p.mu.Lock()
		p.next = monotonicOffset
		p.mu.Unlock()
		return nil
	}
	return p.start(monotonicOffset)
}

// signal sends sig to the process and returns the channel closed when that incarnation exits
// (closed already if none runs). SIGKILL ends its hold at once (it can act no more); SIGKILL and
// SIGTERM make its exit expected.
func (p *proc) signal(sig syscall.Signal) <-chan struct{} {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	token, open := p.token, p.open
	switch sig {
	case syscall.SIGKILL:
		p.expected, p.holding, p.open = true, false, false
	case syscall.SIGTERM:
		p.expected, p.graceful = true, true
	}
	p.mu.Unlock()
	if cmd == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	_ = cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL && open {
		p.endHold(token, time.Now(), EndKilled)
	}
	return exited
}

// incarnation returns the running incarnation and the channel closed at its exit.
func (p *proc) incarnation() (int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inc, p.exited
}

// settle ends, at the exit of incarnation inc, a hold that inc reported and never reported
// ending: the process can act no more. After SIGTERM that is an anomaly: a graceful exit
// releases first. The app calls it once it read everything inc reported (its event stream ended).
func (p *proc) settle(inc int) {
	p.mu.Lock()
	ex, exited := p.exits[inc]
	token, open := p.token, p.open && p.holdInc == inc
	if exited && open {
		p.holding, p.open = false, false
	}
	p.mu.Unlock()
	if !exited || !open {
		return
	}
	if ex.graceful {
		p.run.anomaly(Anomaly{"exit-holding", fmt.Sprintf("%s exited after SIGTERM at %s without reporting token %d released", p.name, stamp(ex.at), token)})
	}
	p.endHold(token, ex.at, EndExited)
}

// current returns the token the app writes with, if it believes it holds the lock.
func (p *proc) current() (token int64, holding bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token, p.holding
}

// held returns the token of the process's open hold (reported, not reported ended), if any.
func (p *proc) held() (token int64, open bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.token, p.open
}

// app follows the sidecar's events (subscribing again after a restart) and writes to the fenced
// resource with its token while it believes it holds the lock. In the cycle workload it also
// acquires, holds for a random time and releases, over and over.
func (p *proc) app(ctx context.Context) {
	if p.run.cfg.Workload == WorkloadRun {
		p.runLoop(ctx)
		return
	}
	client := sidecarclient.New(p.socket)
	var wg sync.WaitGroup
	wg.Go(func() { p.writer(ctx, client) })
	wg.Go(func() { p.sample(ctx) })
	if p.run.cfg.Workload == WorkloadCycle {
		wg.Go(func() { p.cycle(ctx, client) })
	}
	last := 0
	for ctx.Err() == nil {
		inc, exited := p.incarnation()
		if last != 0 && last != inc {
			p.settle(last) // it exited while no stream was open
		}
		last = inc
		events, errs, err := client.Subscribe(ctx)
		if err != nil {
			// Not up yet, or gone: try again soon. The app acquires nothing meanwhile
			// (awaitStream), so no event of its own calls goes unseen.
			select {
			case <-exited:
				p.settle(inc)
			default:
			}
			_ = ctxtime.Sleep(ctx, 10*time.Millisecond)
			continue
		}
		p.setStream(inc)
		for e := range events {
			p.event(e, inc)
		}
		<-errs
		p.setStream(0)
		// Everything inc reported is read; if it is exiting, settle what it left open.
		t := time.NewTimer(time.Second)
		select {
		case <-exited:
			p.settle(inc)
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		_ = ctxtime.Sleep(ctx, 50*time.Millisecond)
	}
	wg.Wait()
}

// cycle is the cycle workload's app: acquire (waiting up to three leases), hold for up to a
// lease, release (or one time in four yield, and hold again when the lock comes back), rest for
// up to half a lease.
func (p *proc) cycle(ctx context.Context, client *sidecarclient.Client) {
	cfg := p.run.cfg
	rng := p.rng
	var again *sidecarclient.LockStatus // granted again by a yield
	for ctx.Err() == nil {
		inc, _ := p.incarnation()
		st := again
		again = nil
		if st == nil {
			// Subscribed first, as an app should be: every event of the calls below is then
			// on the stream (a released event missed would leave the hold open until a kill).
			if !p.awaitStream(ctx, inc) {
				continue
			}
			start := time.Now()
			got, err := client.Acquire(ctx, cfg.Lock, 3*cfg.Lease)
			p.run.addWait(Wait{Process: p.name, Start: start, End: time.Now()})
			if err != nil || got.State != sidecarclient.StateHeld || got.HeldSince.IsZero() {
				_ = ctxtime.Sleep(ctx, 50*time.Millisecond) // not granted, or lost already: its events tell
				continue
			}
			st = &got
		}
		p.event(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: cfg.Lock, Token: st.Token, Time: st.HeldSince}, inc)
		if ctxtime.Sleep(ctx, time.Duration(rng.Int64N(int64(cfg.Lease)))) != nil {
			return
		}
		p.mu.Lock()
		mine := p.holding && p.token == st.Token
		if mine {
			p.holding = false // stop writing before giving the lock back
		}
		p.mu.Unlock()
		if !mine {
			continue
		}
		// One time in four, step down (yield) instead: the lock goes to a waiter, if any, and
		// comes back after it.
		stopped, yield := time.Now(), rng.IntN(4) == 0
		var err error
		if yield {
			var got sidecarclient.LockStatus
			start := time.Now()
			got, err = client.Yield(ctx, cfg.Lock, st.Token, 3*cfg.Lease)
			p.run.addWait(Wait{Process: p.name, Start: start, End: time.Now()})
			if err == nil && got.State == sidecarclient.StateHeld && !got.HeldSince.IsZero() && got.Token != st.Token {
				again = &got
			}
		} else {
			_, err = client.Release(ctx, cfg.Lock, st.Token)
		}
		// Released either way; a yield that ends in ErrShuttingDown released first, or the
		// shutdown releases. (The released event may have come before the app subscribed again.)
		if err == nil || yield && (errors.Is(err, sidecarclient.ErrLocked) || errors.Is(err, sidecarclient.ErrShuttingDown)) {
			p.mu.Lock()
			if p.token == st.Token {
				p.open = false
			}
			p.mu.Unlock()
			p.endHold(st.Token, stopped, EndApp) // the released event dates it unless it never came
		}
		if again == nil && ctxtime.Sleep(ctx, time.Duration(rng.Int64N(int64(cfg.Lease/2)))) != nil {
			return
		}
	}
}

// setStream records which incarnation's event stream the app follows (0: none) and wakes
// awaitStream.
func (p *proc) setStream(inc int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streamInc = inc
	if p.streamSet != nil {
		close(p.streamSet)
	}
	p.streamSet = make(chan struct{})
}

// awaitStream waits until the app follows the event stream of incarnation inc, and reports
// false when inc is not the current incarnation any more (or ctx ended): the caller starts over.
func (p *proc) awaitStream(ctx context.Context, inc int) bool {
	for {
		p.mu.Lock()
		following, current := p.streamInc == inc, p.inc == inc
		if p.streamSet == nil {
			p.streamSet = make(chan struct{})
		}
		changed := p.streamSet
		p.mu.Unlock()
		switch {
		case following && current:
			return true
		case !current:
			return false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// reconcile learns a grant whose acquired event came before the app subscribed (the sidecar holds
// from its start): the lock's status says since when it is held.
func (p *proc) reconcile(ctx context.Context, client *sidecarclient.Client) {
	inc, _ := p.incarnation()
	st, err := client.Lock(ctx, p.run.cfg.Lock)
	if err != nil || st.State != sidecarclient.StateHeld || st.HeldSince.IsZero() {
		return
	}
	p.event(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: st.LockID, Token: st.Token, Time: st.HeldSince}, inc)
}

// event takes in what incarnation inc of the sidecar reported.
func (p *proc) event(e sidecarclient.Event, inc int) {
	if e.LockID != p.run.cfg.Lock {
		return
	}
	switch e.Type {
	case sidecarclient.EventAcquired:
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := p.holdIdx[e.Token]; ok {
			return // learnt already (the Acquire answer, a reconcile, or the event after it)
		}
		if p.holdIdx == nil {
			p.holdIdx = map[int64]int{}
		}
		p.holdIdx[e.Token] = p.run.addHold(Hold{Process: p.name, Lock: e.LockID, Token: e.Token, Start: e.Time})
		p.token, p.holding, p.open, p.holdInc = e.Token, true, true, inc
	case sidecarclient.EventLost, sidecarclient.EventReleased:
		p.mu.Lock()
		if p.token == e.Token {
			p.holding, p.open = false, false
		}
		p.mu.Unlock()
		p.endHold(e.Token, e.Time, string(e.Type))
	}
}

// endHold records the end of the process's hold of token, as reported by how.
func (p *proc) endHold(token int64, at time.Time, how string) {
	p.mu.Lock()
	idx, ok := p.holdIdx[token]
	p.mu.Unlock()
	if ok {
		p.run.endHold(idx, at, how)
	}
}

func (p *proc) writer(ctx context.Context, client *sidecarclient.Client) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n%25 == 0 {
			p.reconcile(ctx, client)
		}
		if token, holding := p.current(); holding {
			p.run.store.Apply(p.run.cfg.Lock, fencedstore.Write{Token: token, Writer: p.name})
		}
	}
}

// sample reads the sidecar's goroutine count and resident memory once a lease.
func (p *proc) sample(ctx context.Context) {
	hc := &http.Client{Timeout: time.Second}
	for ctxtime.Sleep(ctx, p.run.cfg.Lease) == nil {
		u, err := scrape(ctx, hc, "http://"+p.metrics+"/metrics")
		if err != nil {
			continue // not up yet, stopped, or killed
		}
		p.mu.Lock()
		p.usage = append(p.usage, u)
		p.mu.Unlock()
	}
}

func scrape(ctx context.Context, hc *http.Client, url string) (usage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usage{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return usage{}, err
	}
	defer resp.Body.Close()
	u := usage{at: time.Now(), goroutines: -1, rss: -1}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			u.goroutines, _ = strconv.ParseFloat(value, 64)
		case "process_resident_memory_bytes":
			u.rss, _ = strconv.ParseFloat(value, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return usage{}, err
	}
	if u.goroutines < 0 || u.rss < 0 {
		return usage{}, fmt.Errorf("chaos: %s has no go_goroutines or process_resident_memory_bytes", url)
	}
	return u, nil
}
