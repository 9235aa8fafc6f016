package localnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is one component of the node (etcd, kube-apiserver, containerd, kubelet, ...) run as a
// child in a process group of its own, its output in logs/<name>.log.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	err     error // set before exited is closed
}

// startProcess starts bin with args; env is added to the environment of this process.
func startProcess(dir, name, bin string, args []string, env ...string) (*process, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("localnode: %w", err)
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("localnode: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("localnode: starting %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

// alive returns an error naming the log if the process has exited.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("localnode: %s exited (%v); its log %s ends:\n%s", p.name, p.err, p.logPath, logTail(p.logPath, 20))
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group and waits up to grace before SIGKILL.
func (p *process) stop(grace time.Duration) {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.exited
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL) // anything of the group still running
}

// waitFor polls check every interval until it returns nil, ctx ends, or one of procs exits.
func waitFor(ctx context.Context, what string, interval time.Duration, check func(context.Context) error, procs ...*process) error {
	var last error
	for {
		for _, p := range procs {
			if err := p.alive(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localnode: waiting for %s: %w (last: %w)", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var errNotReady = errors.New("not ready")
