package localnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSandbox runs on this machine (root): the holder's namespaces have the sandbox's host name,
// a network with only lo and a netns other than the host's; a tmpfs mounted inside is not seen on
// the host; a wrapped daemon keeps its pid through nsenter's exec and is in the sandbox's
// cgroups; the private paths of design §5 are the node's own inside and unchanged outside;
// destroy ends the holder and the daemon and removes the cgroups.
func TestSandbox(t *testing.T) {
	l := hostCgroups(t, "namespaces and cgroups")
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Fatalf("nsenter (util-linux): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("baton-sbtest-%d", os.Getpid())
	start := time.Now()
	s, err := newSandbox(l, name, "baton-sbtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandbox up in %s", time.Since(start).Round(time.Millisecond))
	destroyed := false
	defer func() {
		if !destroyed {
			_ = s.destroy()
		}
	}()

	out, err := s.run(ctx, "sh", "-c", "cat /proc/sys/kernel/hostname; ip -o link show | wc -l; readlink /proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	got := strings.Fields(string(out))
	if len(got) != 3 || got[0] != "baton-sbtest" || got[1] != "1" || got[2] == hostNet {
		t.Errorf("inside: host name, link count, netns = %q; want baton-sbtest, 1 (lo), not the host's %s", got, hostNet)
	}

	dir := t.TempDir()
	if _, err := s.run(ctx, "sh", "-c", `mount -t tmpfs baton-sbtest "$0" && touch "$0/inside"`, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "inside")); err == nil {
		t.Errorf("a file on a tmpfs mounted inside the sandbox shows on the host")
	}
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("a mount made inside the sandbox shows on the host: %v", m)
	}

	nodeDir := t.TempDir()
	if err := s.mountPrivate(ctx, nodeDir); err != nil {
		t.Fatal(err)
	}
	for _, p := range privatePaths {
		marker := filepath.Join(p.path, name)
		if _, err := s.run(ctx, "touch", marker); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(marker); err == nil {
			_ = os.Remove(marker)
			t.Errorf("%s written inside the sandbox shows on the host", marker)
		}
		if own := filepath.Join(nodeDir, "private", filepath.Base(p.path), name); !p.tmpfs && !fileExists(own) {
			t.Errorf("%s written inside the sandbox is not at %s", marker, own)
		}
	}

	w := s.wrap("sleep", "300")
	daemon := exec.Command(w[0], w[1:]...)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = daemon.Wait(); close(exited) }()
	pid := daemon.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the wrapped process %d is %q, not sleep, after 10s", pid, strings.TrimSpace(string(comm)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	daemonNet, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	holderNet, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", s.pid()))
	if daemonNet != holderNet || !slices.Contains(l.pids(name), pid) {
		t.Errorf("wrapped sleep %d: netns %s (holder's %s), in cgroup %s: %v", pid, daemonNet, holderNet, name, slices.Contains(l.pids(name), pid))
	}

	start = time.Now()
	if err := s.destroy(); err != nil {
		t.Fatal(err)
	}
	destroyed = true
	t.Logf("sandbox destroyed in %s", time.Since(start).Round(time.Millisecond))
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Error("the wrapped sleep still runs after destroy")
	}
	select {
	case <-s.exited:
	default:
		t.Error("the holder still runs after destroy")
	}
	if syscall.Kill(pid, 0) == nil && !zombie(pid) {
		t.Errorf("process %d still runs", pid)
	}
	if d := l.dirs(name); len(d) > 0 {
		t.Errorf("cgroups left: %v", d)
	}
}
