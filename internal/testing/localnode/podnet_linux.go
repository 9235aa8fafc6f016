package localnode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PodDialer returns a dial function that opens connections from inside the network namespace of
// the pod with the given UID, on whichever sandboxed node runs it, as a process of the pod would:
// its source address is the pod's and its routes are the pod's. Use it as an http.Transport's
// DialContext to ask something from a pod's point of view (another pod, a Service).
//
// It finds the pod by its cgroup (pod<uid> below the node's cgroup root) at each dial, so it fails
// once the pod is gone. It does not work for the unsandboxed node (no cgroup root of its own).
func (n *Node) PodDialer(podUID string) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var errs []error
		for _, k := range n.nodes {
			pid, err := k.podPID(podUID)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			return dialInNetns(ctx, pid, network, address)
		}
		return nil, fmt.Errorf("localnode: pod %s on no node: %w", podUID, errors.Join(errs...))
	}
}

// podPID returns a process of the pod with the given UID on node k: any process in a cgroup
// below its pod cgroup (the pause process or a container's), all of which share the pod's network
// namespace.
func (k *kubeNode) podPID(podUID string) (int, error) {
	if k.sb == nil {
		return 0, fmt.Errorf("localnode: %s has no sandbox", k.spec.Name)
	}
	want := "pod" + podUID
	for _, dir := range k.sb.cg.dirs(k.sb.name) {
		if filepath.Base(dir) != want {
			continue
		}
		pid := 0
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || pid != 0 || !d.IsDir() {
				return nil
			}
			procs, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if f := strings.Fields(string(procs)); len(f) > 0 {
				pid, _ = strconv.Atoi(f[0])
			}
			return nil
		})
		if pid != 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("localnode: no process of pod %s on %s", podUID, k.spec.Name)
}

// dialInNetns dials address from the network namespace of process pid (inNetns).
func dialInNetns(ctx context.Context, pid int, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(pid, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("localnode: from process %d's network namespace: %w", pid, err)
	}
	return conn, nil
}

// inNetns runs fn on an OS thread of its own that is in the network namespace of process pid
// while fn runs: a socket fn makes stays in that namespace. Afterwards the thread goes back to its
// own namespace; if that fails, the goroutine ends with its thread still locked, so Go retires the
// thread instead of reusing it. fn must not start goroutines that make sockets.
func inNetns(pid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored, err := inNetnsLocked(pid, fn)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// inNetnsLocked is inNetns's work on the locked thread; restored reports whether the thread is
// back in its own network namespace.
func inNetnsLocked(pid int, fn func() error) (restored bool, _ error) {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return true, err
	}
	defer own.Close()
	target, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return true, fmt.Errorf("entering the network namespace: %w", err)
	}
	fnErr := fn()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("back to this process's network namespace: %w", err)
	}
	return true, fnErr
}
