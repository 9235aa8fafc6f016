package localcassandra

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NodeStatus describes one node of a cluster as seen through its pid file.
type NodeStatus struct {
	Node    int    // 1-based
	Host    string // CQL contact point "ip:port"
	PID     int    // 0 if there is no pid file
	Running bool   // the pid file names a live Cassandra of this node
	CQL     bool   // the CQL port accepts connections
	Log     string // path of system.log
}

// Status reports, from the pid files under cfg.RunDir, which nodes of the
// cluster are running. It works for clusters started by another process.
func Status(ctx context.Context, cfg Config) ([]NodeStatus, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	out := make([]NodeStatus, cfg.Nodes)
	for i := range cfg.Nodes {
		st := NodeStatus{Node: i + 1, Host: cfg.host(i), Log: filepath.Join(cfg.nodeDir(i), "logs", "system.log")}
		st.PID = readPID(cfg.nodeDir(i))
		st.Running = st.PID > 0 && isNodeProcess(st.PID, cfg.nodeDir(i))
		d := net.Dialer{Timeout: time.Second}
		if conn, err := d.DialContext(ctx, "tcp", st.Host); err == nil {
			st.CQL = true
			_ = conn.Close()
		}
		out[i] = st
	}
	return out, nil
}

// Teardown stops the nodes of cfg's cluster listed in the pid files under
// cfg.RunDir (SIGTERM, then SIGKILL after cfg.StopTimeout) and removes the run
// directory. It is how a cluster started in the background by another process
// (DieWithParent false) is stopped; it does nothing if none is running.
func Teardown(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	n, err := stopPIDFiles(ctx, cfg, true)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(cfg.RunDir); err != nil {
		return fmt.Errorf("localcassandra: remove %s: %w", cfg.RunDir, err)
	}
	cfg.progressf("stopped %d node(s), removed %s", n, cfg.RunDir)
	return nil
}

// stopPIDFiles ends every live node process named by a pid file of cfg's
// cluster, gracefully (SIGTERM first) or not, and returns how many there were.
func stopPIDFiles(ctx context.Context, cfg Config, graceful bool) (int, error) {
	var pids []int
	for i := range cfg.Nodes {
		dir := cfg.nodeDir(i)
		if pid := readPID(dir); pid > 0 && isNodeProcess(pid, dir) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return 0, nil
	}
	if graceful {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		deadline := time.Now().Add(cfg.StopTimeout)
		for time.Now().Before(deadline) && anyAlive(pids) && ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for anyAlive(pids) {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("localcassandra: waiting for pids %v to exit: %w", pids, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return len(pids), nil
}

func readPID(nodeDir string) int {
	b, err := os.ReadFile(filepath.Join(nodeDir, "pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// isNodeProcess reports whether pid is a live CassandraDaemon whose config
// lives in nodeDir (and not an unrelated process that reused the pid).
func isNodeProcess(pid int, nodeDir string) bool {
	if !alive(pid) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte(mainClass)) &&
		bytes.Contains(b, []byte("file://"+filepath.Join(nodeDir, "cassandra.yaml")))
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// Format: pid (comm) state ...; comm may contain spaces or parentheses.
	if j := bytes.LastIndexByte(b, ')'); j >= 0 && j+2 < len(b) {
		return b[j+2] != 'Z'
	}
	return true
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if alive(pid) {
			return true
		}
	}
	return false
}
