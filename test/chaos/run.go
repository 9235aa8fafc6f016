//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
)

// Workloads: what the apps do with the lock.
const (
	// WorkloadHold: Blocking-mode sidecars; the holder keeps the lock until a fault takes it.
	WorkloadHold = "hold"
	// WorkloadCycle: Try-mode sidecars; each app acquires (waiting up to three leases), holds for
	// a random time up to a lease, releases (or yields: steps down and waits to get the lock back)
	// and rests, over and over.
	WorkloadCycle = "cycle"
	// WorkloadRun: `baton run` in direct mode (no sidecar), over and over, each waiting up to three
	// leases and running the writer (chaoswriter) for up to a lease; one writer in three ignores
	// SIGTERM, so baton must kill it by the lease's deadline.
	WorkloadRun = "run"
)

// Workloads lists the workloads.
var Workloads = []string{WorkloadHold, WorkloadCycle, WorkloadRun}

// Nodes is the three-node Cassandra cluster the sidecars use, for the node fault classes
// (localcassandra.Cluster is one).
type Nodes interface {
	Hosts() []string
	NodePID(i int) int
	KillNode(ctx context.Context, i int) error
	StartNode(ctx context.Context, i int) error
}

// Config is one run.
type Config struct {
	Binary    string   // cmd/sidecar
	Runner    string   // cmd/baton, for WorkloadRun
	Writer    string   // hack/chaoswriter, for WorkloadRun
	Hosts     []string // Cassandra contact points
	Keyspace  string   // with baton's schema
	Dir       string   // for the sockets; short: a unix socket path has at most 107 bytes
	Lock      string
	Processes int // 2 to 254: process i has its own loopback address for hand-off hints
	Lease     time.Duration
	Workload  string // WorkloadHold when empty
	Class     string
	Seed      uint64        // replays the nemesis's schedule
	Duration  time.Duration // of the nemesis; then the run waits for Regrant and stops
	Log       logr.Logger
	// Output, when set, gets each sidecar's log.
	Output func(process string) io.Writer

	// Nodes are the Cassandra nodes, for ClassNodeKill, ClassNodePause and ClassQuorumLoss.
	Nodes Nodes
	// Revoke revokes a grant the way an operator does (lock.Revoke on the run's store), for
	// ClassRevoke. It gets the lock's ID in the store: "chaos/" + Lock for sidecars (scope
	// Namespaced), Lock for baton run.
	Revoke func(ctx context.Context, lockID string, token int64) error
	// UID, when set, runs sidecar i as user UID+i, so that ClassPartition can drop one sidecar's
	// packets to Cassandra by its owner (iptables, as root). CassandraPort is the nodes' native port.
	UID           int
	CassandraPort int
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
	Crashes   []string // processes that exited on their own, or not cleanly when told to
	Timings   Timings
	// Peak goroutines and resident memory of any sidecar, from their own metrics.
	PeakGoroutines int
	PeakRSS        int64 // bytes
}

// Run runs the workload with the nemesis of cfg.Class and checks the history.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Workload == "" {
		cfg.Workload = WorkloadHold
	}
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	store, err := fencedstore.New(fencedstore.WithLogger(cfg.Log.WithName("fenced")))
	if err != nil {
		return Result{}, err
	}
	r := &run{cfg: cfg, store: store, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))}
	if cfg.Workload == WorkloadRun { // the writers reach the fenced resource over HTTP
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Result{}, fmt.Errorf("chaos: serving the fenced resource: %w", err)
		}
		srv := &http.Server{Handler: store, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		r.fencedURL = "http://" + ln.Addr().String()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); r.wg.Wait() }() // after stopAll and heal: the apps end with the run
	defer r.heal()
	for i := range cfg.Processes {
		p := &proc{run: r, index: i, name: fmt.Sprintf("p%d", i), socket: filepath.Join(cfg.Dir, fmt.Sprintf("p%d.sock", i)),
			rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))}
		if cfg.UID > 0 {
			p.uid = cfg.UID + i
		}
		p.metrics = fmt.Sprintf("127.0.3.%d:%d", i+1, metricsPort)
		r.procs = append(r.procs, p)
		if err := p.start(0); err != nil {
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
	res.Anomalies = append(Check(res.History, CheckOptions{Regrant: cfg.Regrant()}), r.anomalies...)
	res.Anomalies = append(res.Anomalies, r.growth(&res)...)
	return res, nil
}

func (cfg Config) validate() error {
	if cfg.Workload == WorkloadRun && (cfg.Runner == "" || cfg.Writer == "") {
		return fmt.Errorf("chaos: workload %s needs Config.Runner (cmd/baton) and Config.Writer (chaoswriter)", cfg.Workload)
	}
	if cfg.Processes < 2 || cfg.Processes > 254 || cfg.Lease <= 0 || cfg.Duration <= 0 || !slices.Contains(Workloads, cfg.Workload) || !slices.Contains(Classes, cfg.Class) {
		return fmt.Errorf("chaos: bad config: %d processes, lease %v, duration %v, workload %q (want one of %v), class %q (want one of %v)",
			cfg.Processes, cfg.Lease, cfg.Duration, cfg.Workload, Workloads, cfg.Class, Classes)
	}
	if cfg.Class == ClassMixed {
		return nil // mixed draws from the classes this config can run
	}
	return cfg.canRun(cfg.Class)
}

type run struct {
	cfg       Config
	store     *fencedstore.Store
	fencedURL string // the store over HTTP, for WorkloadRun
	rng       *rand.Rand
	procs     []*proc
	wg        sync.WaitGroup
	faulting  atomic.Bool  // a fault is in place
	hangTurn  int          // ClassRestartHang faults so far: which node the next one stops
	healedAt  atomic.Int64 // when the last fault healed (Unix nanoseconds)

	startMu sync.Mutex
	over    bool // stopAll began: nothing starts any more

	healMu sync.Mutex
	heals  []func() // undo what a fault left in place if the run stops early

	mu        sync.Mutex
	holds     []Hold
	waits     []Wait
	faults    []Window
	crashes   []string
	anomalies []Anomaly
	usage     map[string][][]usage // per process, per incarnation
}

func (r *run) addHold(h Hold) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds = append(r.holds, h)
	return len(r.holds) - 1
}

// endHold records how and when hold idx ended. A sidecar's own report (lost, released) dates it,
// and so does a kill; the app's own stop (EndApp) counts only when no report came.
func (r *run) endHold(idx int, at time.Time, how string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := &r.holds[idx]
	switch {
	case h.End.IsZero():
		h.End, h.EndedBy = at, how
	case how == EndApp:
	case h.EndedBy == EndApp || at.Before(h.End):
		h.End, h.EndedBy = at, how
	}
}

func (r *run) setDeadline(idx int, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holds[idx].Deadline = deadline
}

func (r *run) addWait(w Wait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, w)
}

func (r *run) addFault(w Window) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, w)
}

func (r *run) crash(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.crashes = append(r.crashes, what)
}

func (r *run) anomaly(a Anomaly) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.anomalies = append(r.anomalies, a)
}

func (r *run) addUsage(process string, u []usage) {
	if len(u) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.usage == nil {
		r.usage = map[string][][]usage{}
	}
	r.usage[process] = append(r.usage[process], u)
}

// onHeal registers undo for a fault in place; the returned func runs it (once) and forgets it.
func (r *run) onHeal(undo func()) func() {
	var once sync.Once
	do := func() { once.Do(undo) }
	r.healMu.Lock()
	r.heals = append(r.heals, do)
	r.healMu.Unlock()
	return do
}

// heal undoes every fault still in place.
func (r *run) heal() {
	r.healMu.Lock()
	heals := r.heals
	r.heals = nil
	r.healMu.Unlock()
	for _, h := range heals {
		h()
	}
}

// holder returns a process that holds the lock by its own report, if any.
func (r *run) holder() *proc {
	var holding []*proc
	for _, p := range r.procs {
		if _, ok := p.held(); ok {
			holding = append(holding, p)
		}
	}
	if len(holding) == 0 {
		return nil
	}
	return holding[r.rng.IntN(len(holding))]
}

// stopAll ends every sidecar (SIGKILL after SIGCONT): the run is over.
func (r *run) stopAll() {
	r.startMu.Lock()
	r.over = true
	r.startMu.Unlock()
	for _, p := range r.procs {
		p.mu.Lock()
		cmd, exited := p.cmd, p.exited
		p.expected = true
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
	for _, p := range r.procs {
		p.mu.Lock()
		r.addUsage(p.name, p.usage)
		p.usage = nil
		p.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.store.Resource(r.cfg.Lock)
	h := History{Holds: slices.Clone(r.holds), Waits: slices.Clone(r.waits),
		Writes: map[string][]fencedstore.Record{r.cfg.Lock: res.Writes}, Faults: slices.Clone(r.faults), End: end}
	return Result{
		History: h, Faults: len(r.faults), Accepted: res.Accepted, Rejected: res.Rejected,
		Crashes: slices.Clone(r.crashes), Timings: Measure(h),
	}
}

// storeLockID is the lock's ID in Cassandra.
func (cfg Config) storeLockID() string {
	if cfg.Workload == WorkloadRun {
		return cfg.Lock
	}
	return podNamespace + "/" + cfg.Lock // the sidecars' scope is Namespaced
}

// errRunOver is returned by a start after the run stopped its processes.
var errRunOver = errors.New("chaos: the run is over")

// Growth bounds: a sidecar that ran for minGrowthLife may gain this many goroutines and this much
// resident memory from its second sample (its first work done) to its last.
const (
	minGrowthLife   = 10 * time.Second
	goroutineGrowth = 25
	rssGrowth       = 64 << 20
)

// growth reports sidecars whose goroutines or memory grew past the bounds, and fills res's peaks.
func (r *run) growth(res *Result) []Anomaly {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Anomaly
	for _, name := range sortedKeys(r.usage) {
		for _, inc := range r.usage[name] {
			for _, u := range inc {
				res.PeakGoroutines = max(res.PeakGoroutines, int(u.goroutines))
				res.PeakRSS = max(res.PeakRSS, int64(u.rss))
			}
			if len(inc) < 3 || inc[len(inc)-1].at.Sub(inc[1].at) < minGrowthLife {
				continue
			}
			first, last := inc[1], inc[len(inc)-1]
			if last.goroutines-first.goroutines > goroutineGrowth || last.rss-first.rss > rssGrowth {
				out = append(out, Anomaly{"growth", fmt.Sprintf("%s grew from %.0f goroutines and %.1f MiB at %s to %.0f and %.1f MiB at %s",
					name, first.goroutines, first.rss/(1<<20), stamp(first.at), last.goroutines, last.rss/(1<<20), stamp(last.at))})
			}
		}
	}
	return out
}
