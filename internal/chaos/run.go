package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/fencedstore"
	"github.com/baton-dev/baton/sidecarclient"
)

// Fault classes the nemesis injects, one at a time.
const (
	ClassNone  = "none"  // no faults: the workload alone
	ClassKill  = "kill"  // SIGKILL of the holder, restarted with the same pod identity (zero-wait)
	ClassPause = "pause" // SIGSTOP of the holder for longer than the lease, then SIGCONT
)

// Classes lists the fault classes.
var Classes = []string{ClassNone, ClassKill, ClassPause}

// Config is one run.
type Config struct {
	Binary    string   // cmd/sidecar
	Hosts     []string // Cassandra contact points
	Keyspace  string   // with baton's schema
	Dir       string   // for the sockets; short: a unix socket path has at most 107 bytes
	Lock      string
	Processes int
	Lease     time.Duration
	Class     string
	Seed      uint64        // replays the nemesis's schedule
	Duration  time.Duration // of the nemesis; then the run waits for Regrant and stops
	Log       logr.Logger
}

// Regrant is the bound within which a lock must be granted again after the last fault healed:
// a dead holder's lease observed out, plus a restart.
func (c Config) Regrant() time.Duration { return 3 * c.Lease }

// Result is what a run produced.
type Result struct {
	History   History
	Anomalies []Anomaly
	Faults    int
	Rejected  int64 // stale writes the fenced resource refused
	Accepted  int64
	Crashes   []string // processes that exited on their own
}

// Run runs the workload with the nemesis of cfg.Class and checks the history.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Processes < 2 || cfg.Lease <= 0 || cfg.Duration <= 0 || !slices.Contains(Classes, cfg.Class) {
		return Result{}, fmt.Errorf("chaos: bad config: %d processes, lease %v, duration %v, class %q (want one of %v)",
			cfg.Processes, cfg.Lease, cfg.Duration, cfg.Class, Classes)
	}
	store, err := fencedstore.New(fencedstore.WithLogger(cfg.Log.WithName("fenced")))
	if err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, store: store, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range cfg.Processes {
		p := &proc{run: r, name: fmt.Sprintf("p%d", i), socket: filepath.Join(cfg.Dir, fmt.Sprintf("p%d.sock", i))}
		r.procs = append(r.procs, p)
		if err := p.start(); err != nil {
			r.stopAll()
			return Result{}, err
		}
		r.wg.Go(func() { p.app(ctx) })
	}
	defer r.stopAll()
	if err := r.nemesis(ctx); err != nil {
		return Result{}, err
	}
	if err := ctxtime.Sleep(ctx, cfg.Regrant()+cfg.Lease); err != nil {
		return Result{}, err
	}
	end := time.Now()
	r.stopAll()
	cancel()
	r.wg.Wait()

	res := r.result(end)
	res.Anomalies = Check(res.History, CheckOptions{Regrant: cfg.Regrant()})
	return res, nil
}

type run struct {
	cfg   Config
	store *fencedstore.Store
	rng   *rand.Rand
	procs []*proc
	wg    sync.WaitGroup

	mu      sync.Mutex
	holds   []Hold
	faults  []Window
	crashes []string
}

// proc is one sidecar process and its app.
type proc struct {
	run    *run
	name   string
	socket string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killed  bool // by the nemesis: its exit is expected
	open    int  // index in run.holds of its open hold, -1 when none
	token   int64
	holding bool
	seen    map[int64]bool // tokens this process reported, so each grant is recorded once
}

func (p *proc) start() error {
	cfg := p.run.cfg
	cmd := exec.Command(cfg.Binary)
	cmd.Env = append(os.Environ(),
		"BATON_LOCK_IDS="+cfg.Lock, "BATON_MODE=Blocking", "BATON_TRAFFIC_POLICY=None",
		"BATON_LEASE="+cfg.Lease.String(), "BATON_SHUTDOWN_TIMEOUT=5s",
		"BATON_CASSANDRA_HOSTS="+strings.Join(cfg.Hosts, ","), "BATON_CASSANDRA_KEYSPACE="+cfg.Keyspace,
		"POD_NAMESPACE=chaos", "POD_NAME="+p.name, "POD_UID=uid-"+p.name,
		"BATON_SOCKET="+p.socket, "BATON_METRICS_ADDR=127.0.0.1:0")
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: starting sidecar %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited, p.killed, p.open = cmd, exited, false, -1
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		expected := p.killed
		p.mu.Unlock()
		if !expected {
			p.run.mu.Lock()
			p.run.crashes = append(p.run.crashes, fmt.Sprintf("%s: %v", p.name, err))
			p.run.mu.Unlock()
		}
		close(exited)
	}()
	return nil
}

// signal sends sig to the sidecar; a SIGKILL also ends its hold at once (it can act no more).
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	if sig == syscall.SIGKILL {
		p.killed = true
		p.holding = false
	}
	p.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		p.endHold(time.Now())
	}
}

// app follows the sidecar's events (subscribing again after a restart) and, while it believes it
// holds the lock, writes to the fenced resource with its token.
func (p *proc) app(ctx context.Context) {
	client := sidecarclient.New(p.socket)
	go p.writer(ctx, client)
	for ctx.Err() == nil {
		events, errs := client.Events(ctx)
		for e := range events {
			p.event(e)
		}
		<-errs
		_ = ctxtime.Sleep(ctx, 50*time.Millisecond)
	}
}

// reconcile learns a grant whose acquired event came before the app subscribed (the sidecar holds
// from its start): the lock's status says since when it is held.
func (p *proc) reconcile(ctx context.Context, client *sidecarclient.Client) {
	st, err := client.Lock(ctx, p.run.cfg.Lock)
	if err != nil || st.State != sidecarclient.StateHeld || st.HeldSince.IsZero() {
		return
	}
	p.event(sidecarclient.Event{Type: sidecarclient.EventAcquired, LockID: st.LockID, Token: st.Token, Time: st.HeldSince})
}

func (p *proc) event(e sidecarclient.Event) {
	if e.LockID != p.run.cfg.Lock {
		return
	}
	switch e.Type {
	case sidecarclient.EventAcquired:
		p.mu.Lock()
		if p.seen[e.Token] {
			p.mu.Unlock()
			return // learnt already (a reconcile, or the event after it), or a status read before the loss
		}
		if p.seen == nil {
			p.seen = map[int64]bool{}
		}
		p.seen[e.Token] = true
		p.token, p.holding = e.Token, true
		p.mu.Unlock()
		p.run.mu.Lock()
		p.run.holds = append(p.run.holds, Hold{Process: p.name, Lock: e.LockID, Token: e.Token, Start: e.Time})
		idx := len(p.run.holds) - 1
		p.run.mu.Unlock()
		p.mu.Lock()
		p.open = idx
		p.mu.Unlock()
	case sidecarclient.EventLost, sidecarclient.EventReleased:
		p.mu.Lock()
		p.holding = false
		p.mu.Unlock()
		p.endHold(e.Time)
	}
}

func (p *proc) endHold(at time.Time) {
	p.mu.Lock()
	idx := p.open
	p.open = -1
	p.mu.Unlock()
	if idx < 0 {
		return
	}
	p.run.mu.Lock()
	if h := &p.run.holds[idx]; h.End.IsZero() || at.Before(h.End) {
		h.End = at
	}
	p.run.mu.Unlock()
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
		p.mu.Lock()
		token, holding := p.token, p.holding
		p.mu.Unlock()
		if holding {
			p.run.store.Apply(p.run.cfg.Lock, fencedstore.Write{Token: token, Writer: p.name})
		}
	}
}

// holder returns a process that holds the lock by its own report, if any.
func (r *run) holder() *proc {
	var holding []*proc
	for _, p := range r.procs {
		p.mu.Lock()
		if p.holding {
			holding = append(holding, p)
		}
		p.mu.Unlock()
	}
	if len(holding) == 0 {
		return nil
	}
	return holding[r.rng.IntN(len(holding))]
}

// nemesis injects cfg.Class faults for cfg.Duration, one at a time, each healed before the next.
func (r *run) nemesis(ctx context.Context) error {
	cfg := r.cfg
	deadline := time.Now().Add(cfg.Duration)
	for time.Now().Before(deadline) {
		if err := ctxtime.Sleep(ctx, cfg.Lease+time.Duration(r.rng.Int64N(int64(cfg.Lease)))); err != nil {
			return err
		}
		p := r.holder()
		if p == nil || cfg.Class == ClassNone {
			continue
		}
		start := time.Now()
		switch cfg.Class {
		case ClassKill:
			p.signal(syscall.SIGKILL)
			<-p.exited
			if err := ctxtime.Sleep(ctx, time.Duration(r.rng.Int64N(int64(cfg.Lease)))); err != nil {
				return err
			}
			if err := p.start(); err != nil {
				return err
			}
		case ClassPause:
			p.signal(syscall.SIGSTOP)
			if err := ctxtime.Sleep(ctx, cfg.Lease+time.Duration(r.rng.Int64N(int64(cfg.Lease)))); err != nil {
				p.signal(syscall.SIGCONT)
				return err
			}
			p.signal(syscall.SIGCONT)
		}
		r.mu.Lock()
		r.faults = append(r.faults, Window{Name: cfg.Class + " " + p.name, Start: start, End: time.Now()})
		r.mu.Unlock()
		cfg.Log.V(1).Info("fault healed", "class", cfg.Class, "process", p.name, "took", time.Since(start).String())
	}
	return nil
}

// stopAll ends every sidecar (SIGKILL after SIGCONT): the run is over.
func (r *run) stopAll() {
	for _, p := range r.procs {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.killed = true
		p.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

func (r *run) result(end time.Time) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.store.Resource(r.cfg.Lock)
	return Result{
		History: History{Holds: slices.Clone(r.holds), Writes: map[string][]fencedstore.Record{r.cfg.Lock: res.Writes},
			Faults: slices.Clone(r.faults), End: end},
		Faults: len(r.faults), Accepted: res.Accepted, Rejected: res.Rejected, Crashes: slices.Clone(r.crashes),
	}
}
