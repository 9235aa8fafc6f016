//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/lock"
)

// Fault classes the nemesis injects, one at a time.
const (
	ClassNone       = "none"        // no faults: the workload alone
	ClassKill       = "kill"        // SIGKILL of the holder, restarted with the same pod identity (zero-wait)
	ClassPause      = "pause"       // SIGSTOP of the holder for longer than the lease, then SIGCONT
	ClassClock      = "clock"       // SIGKILL of a process, restarted in its own time namespace, hours to weeks ahead
	ClassPartition  = "partition"   // the holder's packets to Cassandra dropped for longer than the lease
	ClassRevoke     = "revoke"      // the holder's grant revoked, as an operator does
	ClassStorm      = "storm"       // SIGTERM of every process at once (graceful releases), then all restarted
	ClassMalformed  = "malformed"   // malformed requests to every sidecar's API while the holder is killed
	ClassNodeKill   = "node-kill"   // kill -9 of one Cassandra node, restarted after one to two leases
	ClassNodePause  = "node-pause"  // SIGSTOP of one Cassandra node for one to three leases (quorum stays)
	ClassQuorumLoss = "quorum-loss" // SIGSTOP of two of three Cassandra nodes for one to two leases
	// ClassRestartHang: kill -9 of one Cassandra node, restarted within a lease; as soon as it is
	// back, SIGSTOP of the other two for a lease (quorum lost) and SIGCONT; once the lock is held
	// again, SIGSTOP of one of those two for two to three leases (quorum stays). The hung node is
	// each node in turn, the first contact point included.
	ClassRestartHang = "restart-hang"
	ClassMixed       = "mixed" // each fault of the next class above that the config can run, in turn
)

// Classes lists the fault classes.
var Classes = []string{ClassNone, ClassKill, ClassPause, ClassClock, ClassPartition, ClassRevoke, ClassStorm,
	ClassMalformed, ClassNodeKill, ClassNodePause, ClassQuorumLoss, ClassRestartHang, ClassMixed}

// ErrUnavailable is returned by Run for a class the config or the machine cannot run (no Nodes, no
// Revoke, not root, no iptables or unshare).
var ErrUnavailable = errors.New("chaos: fault class unavailable")

// canRun says whether cfg and this machine can inject class.
func (cfg Config) canRun(class string) error {
	need := func(what string) error { return fmt.Errorf("%w: %s needs %s", ErrUnavailable, class, what) }
	switch class {
	case ClassNodeKill, ClassNodePause, ClassQuorumLoss, ClassRestartHang:
		if cfg.Nodes == nil || len(cfg.Nodes.Hosts()) < 3 {
			return need("Config.Nodes with three nodes")
		}
	case ClassRevoke:
		if cfg.Revoke == nil {
			return need("Config.Revoke")
		}
	case ClassPartition:
		if cfg.UID == 0 || cfg.CassandraPort == 0 {
			return need("Config.UID and Config.CassandraPort (and root)")
		}
		if _, err := exec.LookPath("iptables"); err != nil {
			return need("iptables (make install-deps installs it)")
		}
	case ClassClock:
		if _, err := exec.LookPath("unshare"); err != nil {
			return need("unshare (util-linux)")
		}
		if os.Geteuid() != 0 {
			return need("root (a time namespace)")
		}
	}
	if !Applies(class, cfg.Workload) {
		return fmt.Errorf("%w: %s does not apply to workload %s", ErrUnavailable, class, cfg.Workload)
	}
	return nil
}

// Applies says whether class makes sense for workload: malformed requests need the sidecars'
// socket API, which baton run in direct mode does not have.
func Applies(class, workload string) bool {
	return class != ClassMalformed || workload != WorkloadRun
}

// nemesis injects faults for cfg.Duration, one at a time, each healed before the next.
func (r *run) nemesis(ctx context.Context) error {
	cfg := r.cfg
	classes := []string{cfg.Class}
	if cfg.Class == ClassMixed {
		classes = nil
		for _, c := range Classes {
			if c != ClassNone && c != ClassMixed && cfg.canRun(c) == nil {
				classes = append(classes, c)
			}
		}
	}
	// Mixed takes the classes in turn, from a start that the seed and the workload choose, so that
	// even short runs of each workload together cover most classes.
	turn := int(cfg.Seed%uint64(len(classes))) + slices.Index(Workloads, cfg.Workload)*len(classes)/len(Workloads)
	deadline := time.Now().Add(cfg.Duration)
	for ; time.Now().Before(deadline); turn++ {
		if err := ctxtime.Sleep(ctx, r.between(1, 2)); err != nil {
			return err
		}
		class := classes[turn%len(classes)]
		if class == ClassNone {
			continue
		}
		start := time.Now()
		r.faulting.Store(true)
		w, ok, err := r.inject(ctx, class)
		r.healedAt.Store(time.Now().UnixNano())
		r.faulting.Store(false)
		if err != nil {
			return fmt.Errorf("chaos: %s: %w", class, err)
		}
		if !ok {
			continue
		}
		w.Name = class + " " + w.Name
		if w.Start.IsZero() {
			w.Start = start
		}
		if w.End.IsZero() {
			w.End = time.Now()
		}
		r.addFault(w)
		cfg.Log.V(1).Info("fault healed", "fault", w.Name, "took", w.End.Sub(w.Start).String())
	}
	return nil
}

// between returns a random duration from lo to hi leases.
func (r *run) between(lo, hi float64) time.Duration {
	l := float64(r.cfg.Lease)
	return time.Duration(lo*l + r.rng.Float64()*(hi-lo)*l)
}

// inject injects one fault of class and heals it. ok is false when there was nothing to inject
// it into (no holder).
func (r *run) inject(ctx context.Context, class string) (w Window, ok bool, err error) {
	switch class {
	case ClassKill, ClassPause, ClassPartition, ClassRevoke:
		p := r.holder()
		if p == nil {
			return Window{}, false, nil
		}
		w.Name = p.name
		w.Token, _ = p.held()
		switch class {
		case ClassKill:
			err = r.restart(ctx, p, r.between(0, 1), 0)
		case ClassPause:
			w.Paused = p.name
			err = r.pause(ctx, p)
		case ClassPartition:
			err = r.partition(ctx, p)
		case ClassRevoke:
			ok, err = r.revoke(ctx, p, w.Token)
			return w, ok, err
		}
		return w, true, err
	case ClassClock:
		p := r.procs[r.rng.IntN(len(r.procs))]
		if token, holding := p.held(); holding {
			w.Token = token
		}
		offset := 3600 + r.rng.Int64N(30*86400)
		w.Name = fmt.Sprintf("%s +%ds", p.name, offset)
		return w, true, r.restart(ctx, p, 0, offset)
	case ClassStorm:
		if p := r.holder(); p != nil {
			w.Token, _ = p.held()
		}
		w.Name = "all"
		return w, true, r.storm(ctx)
	case ClassMalformed:
		p := r.holder()
		if p != nil {
			w.Name = p.name
			w.Token, _ = p.held()
			<-p.signal(syscall.SIGKILL)
		}
		n := r.flood(ctx, r.between(1, 2))
		w.Name = fmt.Sprintf("%s %d requests", w.Name, n)
		if p != nil {
			err = r.restart(ctx, p, 0, 0)
		}
		return w, true, err
	case ClassNodeKill, ClassNodePause, ClassQuorumLoss:
		return r.nodeFault(ctx, class)
	case ClassRestartHang:
		return r.restartThenHang(ctx)
	}
	return Window{}, false, fmt.Errorf("no fault class %q", class)
}

// restart kills p (SIGKILL), waits for its exit and then for wait, and starts it again under its
// pod identity, in a time namespace monotonicOffset seconds ahead if that is > 0.
func (r *run) restart(ctx context.Context, p *proc, wait time.Duration, monotonicOffset int64) error {
	<-p.signal(syscall.SIGKILL)
	if err := ctxtime.Sleep(ctx, wait); err != nil {
		return err
	}
	return p.startAgain(monotonicOffset)
}

func (r *run) pause(ctx context.Context, p *proc) error {
	p.signal(syscall.SIGSTOP)
	resume := r.onHeal(func() { p.signal(syscall.SIGCONT) })
	defer resume()
	return ctxtime.Sleep(ctx, r.between(1, 2))
}

// partition drops p's packets to Cassandra's native port for one to two leases.
func (r *run) partition(ctx context.Context, p *proc) error {
	rule := []string{"OUTPUT", "-o", "lo", "-p", "tcp", "--dport", strconv.Itoa(r.cfg.CassandraPort),
		"-m", "owner", "--uid-owner", strconv.Itoa(p.uid), "-j", "DROP"}
	var healErr error
	lift := r.onHeal(func() {
		if out, err := exec.Command("iptables", append([]string{"-w", "-D"}, rule...)...).CombinedOutput(); err != nil {
			healErr = fmt.Errorf("iptables -D %v: %w: %s", rule, err, out)
		}
	})
	if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		healErr = nil
		lift() // nothing to lift, but forget it
		return fmt.Errorf("iptables -I %v: %w: %s", rule, err, out)
	}
	err := ctxtime.Sleep(ctx, r.between(1, 2))
	lift()
	return errors.Join(err, healErr)
}

// revoke revokes p's grant of token and waits until p reports it lost (three leases at most).
// ok is false when the grant ended before the revocation (a release in the cycle workload).
func (r *run) revoke(ctx context.Context, p *proc, token int64) (ok bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Lease)
	err = r.cfg.Revoke(rctx, r.cfg.storeLockID(), token)
	cancel()
	switch {
	case errors.Is(err, lock.ErrNotHolder):
		return false, nil
	case err != nil:
		r.cfg.Log.Info("revocation failed; no fault injected", "token", token, "err", err.Error())
		return false, ctx.Err()
	}
	deadline := time.Now().Add(3 * r.cfg.Lease)
	for time.Now().Before(deadline) {
		if t, holding := p.held(); !holding || t != token {
			return true, nil
		}
		if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
			return true, err
		}
	}
	r.anomaly(Anomaly{"revocation", fmt.Sprintf("%s still reports token %d held %v after it was revoked", p.name, token, 3*r.cfg.Lease)})
	return true, nil
}

// storm ends every process with SIGTERM at once (each releases what it holds and leaves the
// queue), waits for their exits, and restarts them all within a lease.
func (r *run) storm(ctx context.Context) error {
	var exits []<-chan struct{}
	for _, p := range r.procs {
		exits = append(exits, p.signal(syscall.SIGTERM))
	}
	for _, exited := range exits {
		<-exited
	}
	if err := ctxtime.Sleep(ctx, r.between(0, 1)); err != nil {
		return err
	}
	for _, p := range r.procs {
		if err := p.startAgain(0); err != nil {
			return err
		}
	}
	return nil
}

// nodeFault kills or stops Cassandra nodes and brings them back.
func (r *run) nodeFault(ctx context.Context, class string) (w Window, ok bool, err error) {
	nodes := r.cfg.Nodes
	i := r.rng.IntN(len(nodes.Hosts()))
	w.Name = nodes.Hosts()[i]
	if p := r.holder(); p != nil {
		w.Token, _ = p.held()
	}
	switch class {
	case ClassNodeKill:
		w.KeepHolds = true
		var startErr error
		restart := r.onHeal(func() { startErr = nodes.StartNode(context.WithoutCancel(ctx), i) })
		if err := nodes.KillNode(ctx, i); err != nil {
			restart()
			return w, false, errors.Join(err, startErr)
		}
		sleepErr := ctxtime.Sleep(ctx, r.between(1, 2))
		restart()
		return w, true, errors.Join(sleepErr, startErr)
	case ClassNodePause:
		w.KeepHolds = true
		resume, err := r.stopNodes(i)
		if err != nil {
			return w, false, err
		}
		defer resume()
		return w, true, ctxtime.Sleep(ctx, r.between(1, 3))
	default: // ClassQuorumLoss
		j := (i + 1 + r.rng.IntN(len(nodes.Hosts())-1)) % len(nodes.Hosts())
		w.Name += " " + nodes.Hosts()[j]
		w.NoGrants = true
		resume, err := r.stopNodes(i, j)
		if err != nil {
			return w, false, err
		}
		defer resume()
		err = ctxtime.Sleep(ctx, r.between(1, 2))
		w.End = time.Now() // before the nodes resume: grants may come at once after
		return w, true, err
	}
}

// restartThenHang replays the sequence that cost a sidecar its locks in an outside chaos run
// (issue 22): one node is killed and started again at once; as soon as every node sees it up,
// quorum is lost for a lease (the other two nodes stopped) and comes back; and once the lock is
// held again, one of those two nodes hangs (SIGSTOP) for two to three leases while the restarted
// node and the third keep quorum. The hung node is each node in turn, from one the seed chooses,
// so that three such faults (in one run, or in runs of consecutive seeds) hang every node once:
// the first contact point, and the lock's first replica. It records three windows: the restart
// (quorum stays), the quorum loss (no grants) and the hang (quorum stays: no hold may be lost).
func (r *run) restartThenHang(ctx context.Context) (w Window, ok bool, err error) {
	nodes := r.cfg.Nodes
	hosts := nodes.Hosts()
	n := len(hosts)
	h := int((r.cfg.Seed + uint64(r.hangTurn)) % uint64(n))
	r.hangTurn++
	k := (h + 1 + r.rng.IntN(n-1)) % n // restarted
	j := (h + 1) % n                   // the third
	if j == k {
		j = (k + 1) % n
	}
	window := func(name string) Window {
		w := Window{Name: name, Start: time.Now()}
		if p := r.holder(); p != nil {
			w.Token, _ = p.held()
		}
		return w
	}
	record := func(w Window) { // the nemesis records and names the last window, the hang
		w.End = time.Now()
		w.Name = ClassRestartHang + " " + w.Name
		r.addFault(w)
	}

	restarted := window(hosts[k] + " restarted")
	restarted.KeepHolds = true
	var startErr error
	restart := r.onHeal(func() { startErr = nodes.StartNode(context.WithoutCancel(ctx), k) })
	if err := nodes.KillNode(ctx, k); err != nil {
		restart()
		return w, false, errors.Join(err, startErr)
	}
	sleepErr := ctxtime.Sleep(ctx, r.between(0, 1))
	restart()
	record(restarted)
	if err := errors.Join(sleepErr, startErr); err != nil {
		return w, false, err
	}

	lost := window(hosts[h] + " " + hosts[j] + " quorum lost")
	lost.NoGrants = true
	resume, err := r.stopNodes(h, j)
	if err != nil {
		return w, false, err
	}
	sleepErr = ctxtime.Sleep(ctx, r.cfg.Lease)
	record(lost) // ends before the nodes resume: grants may come at once after
	resume()
	if sleepErr != nil {
		return w, false, sleepErr
	}

	// The hang tests something only while the lock is held.
	for deadline := time.Now().Add(2 * r.cfg.Lease); r.holder() == nil && time.Now().Before(deadline); {
		if err := ctxtime.Sleep(ctx, 20*time.Millisecond); err != nil {
			return w, false, err
		}
	}
	w = window(hosts[h] + " hung")
	w.KeepHolds = true
	r.cfg.Log.V(1).Info("node restarted and quorum back; hanging a node", "restarted", hosts[k], "hung", hosts[h])
	if resume, err = r.stopNodes(h); err != nil {
		return w, false, err
	}
	defer resume()
	return w, true, ctxtime.Sleep(ctx, r.between(2, 3))
}

// stopNodes sends SIGSTOP to the nodes; resume sends them SIGCONT.
func (r *run) stopNodes(idxs ...int) (resume func(), err error) {
	var pids []int
	for _, i := range idxs {
		pid := r.cfg.Nodes.NodePID(i)
		if pid <= 0 {
			return nil, fmt.Errorf("node %d is not running", i)
		}
		pids = append(pids, pid)
	}
	resume = r.onHeal(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			resume()
			return nil, fmt.Errorf("stopping node pid %d: %w", pid, err)
		}
	}
	return resume, nil
}
