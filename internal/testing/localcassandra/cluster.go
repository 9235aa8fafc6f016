package localcassandra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cluster is a running local cluster started by Start. Node indexes i are
// 0-based (the index into Hosts); progress lines and directories count nodes
// from 1. Its methods are safe for concurrent use.
type Cluster struct {
	cfg    Config
	libDir string
	java   string
	cds    string // the cache's class data sharing archive (cds.go); empty: none

	mu    sync.Mutex
	nodes []*nodeProc // nil entry: node not running
}

// nodeProc is one running JVM started by this process.
type nodeProc struct {
	pid  int
	done chan struct{} // closed once the process has exited and been reaped
}

// Start installs Cassandra if needed, kills nodes of the same cluster left
// over by an earlier run, wipes cfg.RunDir, writes per-node configuration,
// starts all nodes in parallel and waits until every node answers CQL and (for
// several nodes) sees all others UP. On failure it kills the nodes it started
// and returns an error with the tail of the failing node's log; the run
// directory is kept for inspection.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	libDir, err := install(ctx, cfg, false)
	if err != nil {
		return nil, err
	}
	java, err := javaBinary(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if n, err := stopPIDFiles(ctx, cfg, false); err != nil {
		return nil, err
	} else if n > 0 {
		cfg.progressf("killed %d stale node(s) of an earlier run", n)
	}
	if err := os.RemoveAll(cfg.RunDir); err != nil {
		return nil, fmt.Errorf("localcassandra: wipe %s: %w", cfg.RunDir, err)
	}
	if err := checkPortsFree(cfg); err != nil {
		return nil, err
	}
	for i := range cfg.Nodes {
		if err := cfg.writeNodeFiles(i); err != nil {
			return nil, err
		}
	}
	c := &Cluster{cfg: cfg, libDir: libDir, java: java, nodes: make([]*nodeProc, cfg.Nodes)}
	if c.cds, err = cfg.cdsArchivePath(java); err != nil {
		cfg.Log.V(1).Info("no class data sharing", "cluster", cfg.Name, "error", err.Error())
		c.cds = ""
	}
	start := time.Now()
	cfg.progressf("starting %d node(s) of Cassandra %s (heap %d MiB each, state in %s)", cfg.Nodes, cfg.Version, cfg.HeapMB, cfg.RunDir)
	all := make([]int, cfg.Nodes)
	for i := range cfg.Nodes {
		all[i] = i
		if err := c.launch(i); err != nil {
			c.killAll()
			return nil, err
		}
	}
	if err := c.waitUp(ctx, all, start); err != nil {
		c.killAll()
		return nil, err
	}
	cfg.progressf("cluster up after %s: %s", since(start), strings.Join(c.Hosts(), ","))
	return c, nil
}

// Config returns the cluster's configuration with defaults filled in.
func (c *Cluster) Config() Config { return c.cfg }

// Hosts returns the CQL contact points, "ip:port", one per node.
func (c *Cluster) Hosts() []string {
	hosts := make([]string, c.cfg.Nodes)
	for i := range hosts {
		hosts[i] = c.cfg.host(i)
	}
	return hosts
}

// NodeHost returns node i's CQL contact point "ip:port".
func (c *Cluster) NodeHost(i int) string { return c.cfg.host(i) }

// NodePID returns the process id of node i, or 0 if it is not running.
func (c *Cluster) NodePID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) || c.nodes[i] == nil {
		return 0
	}
	return c.nodes[i].pid
}

// NodeLog returns the path of node i's system.log.
func (c *Cluster) NodeLog(i int) string {
	return filepath.Join(c.cfg.nodeDir(i), "logs", "system.log")
}

// KillNode sends SIGKILL to node i and waits until its process is gone.
func (c *Cluster) KillNode(ctx context.Context, i int) error {
	p, err := c.takeNode(i)
	if err != nil {
		return err
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("localcassandra: waiting for node %d (pid %d) to die: %w", i+1, p.pid, ctx.Err())
	}
	_ = os.Remove(filepath.Join(c.cfg.nodeDir(i), "pid"))
	c.cfg.progressf("node %d/%d killed", i+1, c.cfg.Nodes)
	return nil
}

// StartNode restarts node i on its existing data and waits until it answers
// CQL and every node sees every other one UP.
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	if i < 0 || i >= c.cfg.Nodes {
		return fmt.Errorf("localcassandra: no node %d in cluster %s", i, c.cfg.Name)
	}
	c.mu.Lock()
	running := c.nodes[i] != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("localcassandra: node %d of %s is already running", i+1, c.cfg.Name)
	}
	start := time.Now()
	if err := c.launch(i); err != nil {
		return err
	}
	if err := c.waitUp(ctx, []int{i}, start); err != nil {
		return err
	}
	return nil
}

// Stop stops all nodes (SIGTERM, then SIGKILL after cfg.StopTimeout) and
// removes the run directory. It may be called more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	procs := c.nodes
	c.nodes = make([]*nodeProc, len(procs))
	c.mu.Unlock()
	var running []*nodeProc
	for _, p := range procs {
		if p != nil {
			running = append(running, p)
			_ = syscall.Kill(p.pid, syscall.SIGTERM)
		}
	}
	grace := time.NewTimer(c.cfg.StopTimeout)
	defer grace.Stop()
	var err error
	killed := false
	for _, p := range running {
		select {
		case <-p.done:
			continue
		case <-grace.C:
		case <-ctx.Done():
		}
		// Out of patience: kill this and every remaining node.
		killed = true
		for _, q := range running {
			_ = syscall.Kill(q.pid, syscall.SIGKILL)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			err = fmt.Errorf("localcassandra: stopping pid %d: %w", p.pid, ctx.Err())
		}
	}
	if err != nil {
		return err
	}
	if !killed && procs[0] != nil {
		// Node 0 exited on its own, so an archive it wrote is whole.
		if err := c.cfg.keepCDSArchive(c.cds); err != nil {
			c.cfg.progressf("class data sharing archive not kept: %v", err)
		}
	}
	if rmErr := os.RemoveAll(c.cfg.RunDir); rmErr != nil {
		return fmt.Errorf("localcassandra: remove %s: %w", c.cfg.RunDir, rmErr)
	}
	c.cfg.progressf("stopped")
	return nil
}

// takeNode removes node i from the running set and returns it.
func (c *Cluster) takeNode(i int) (*nodeProc, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.nodes) {
		return nil, fmt.Errorf("localcassandra: no node %d in cluster %s", i, c.cfg.Name)
	}
	p := c.nodes[i]
	if p == nil {
		return nil, fmt.Errorf("localcassandra: node %d of %s is not running", i+1, c.cfg.Name)
	}
	c.nodes[i] = nil
	return p, nil
}

// running returns node i's process if it is running.
func (c *Cluster) running(i int) *nodeProc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// launch starts node i's JVM and writes its pid file.
func (c *Cluster) launch(i int) error {
	args, err := c.cfg.jvmArgs(c.libDir, i, c.cds)
	if err != nil {
		return err
	}
	dir := c.cfg.nodeDir(i)
	console, err := os.OpenFile(filepath.Join(dir, "logs", "console.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	defer console.Close() // the child has its own copy
	cmd := exec.Command(c.java, args...)
	cmd.Dir = dir // hs_err files land here
	cmd.Stdout = console
	cmd.Stderr = console
	cmd.Env = append(os.Environ(), "MALLOC_ARENA_MAX=4")
	cmd.SysProcAttr = sysProcAttr(c.cfg.DieWithParent)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("localcassandra: start node %d: %w", i+1, err)
	}
	p := &nodeProc{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	c.cfg.Log.V(1).Info("started cassandra node", "cluster", c.cfg.Name, "node", i+1, "pid", p.pid, "args", args)
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("localcassandra: %w", err)
	}
	c.mu.Lock()
	c.nodes[i] = p
	c.mu.Unlock()
	return nil
}

// killAll SIGKILLs every running node and waits for them to exit.
func (c *Cluster) killAll() {
	c.mu.Lock()
	procs := c.nodes
	c.nodes = make([]*nodeProc, len(procs))
	c.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
	}
	for _, p := range procs {
		if p != nil {
			<-p.done
		}
	}
}

// waitUp waits until nodes idxs answer CQL, then (several nodes) until every
// node sees every other node UP. It prints progress relative to start.
func (c *Cluster) waitUp(ctx context.Context, idxs []int, start time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	if err := parallel(idxs, func(i int) error {
		if err := c.waitCQL(ctx, i); err != nil {
			cancel()
			return err
		}
		c.cfg.progressf("node %d/%d (%s) up after %s", i+1, c.cfg.Nodes, c.cfg.host(i), since(start))
		return nil
	}); err != nil {
		return err
	}
	if c.cfg.Nodes == 1 {
		return nil
	}
	all := make([]int, c.cfg.Nodes)
	for i := range all {
		all[i] = i
	}
	if err := parallel(all, func(i int) error {
		if err := c.waitPeersUp(ctx, i); err != nil {
			cancel()
			return err
		}
		return nil
	}); err != nil {
		return err
	}
	c.cfg.progressf("all %d nodes see each other UP after %s", c.cfg.Nodes, since(start))
	return nil
}

// parallel runs f for each index concurrently and returns the first error.
func parallel(idxs []int, f func(i int) error) error {
	errs := make([]error, len(idxs))
	var wg sync.WaitGroup
	for k, i := range idxs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = f(i)
		}()
	}
	wg.Wait()
	// Prefer a real failure over the cancellations it caused.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// nodeFailure builds an error for node i that includes the tail of its logs.
func (c *Cluster) nodeFailure(i int, what string, err error) error {
	dir := c.cfg.nodeDir(i)
	sys := filepath.Join(dir, "logs", "system.log")
	console := filepath.Join(dir, "logs", "console.log")
	return fmt.Errorf("localcassandra: cluster %s node %d (%s) %s\n--- tail of %s ---\n%s\n--- tail of %s ---\n%s\n---: %w",
		c.cfg.Name, i+1, c.cfg.host(i), what, sys, tailFile(sys, 40), console, tailFile(console, 15), err)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }

// checkPortsFree fails early, with a clear message, when a node's ports are
// taken (typically by the same cluster started by someone else).
func checkPortsFree(cfg Config) error {
	for i := range cfg.Nodes {
		for _, port := range []int{cfg.NativePort, cfg.StoragePort} {
			addr := net.JoinHostPort(cfg.IPs[i], strconv.Itoa(port))
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("localcassandra: cluster %s needs %s but it is in use (another Cassandra? try `go run ./hack/cassandra status`): %w", cfg.Name, addr, err)
			}
			_ = l.Close()
		}
	}
	return nil
}
