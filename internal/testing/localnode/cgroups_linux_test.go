package localnode

import (
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

// hybridMountinfo is this machine's cgroup mounts (Linux 6.18, v1 hierarchies and an empty
// cgroup2 tree at unified), trimmed.
const hybridMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// TestDetectCgroups: a hybrid machine's v1 hierarchies by controller (mount flags are not
// controllers, co-mounted ones share a directory) and its cgroup2 tree; a pure v2 machine; and a
// machine with no way to freeze a node is refused.
func TestDetectCgroups(t *testing.T) {
	l, err := detectCgroups([]byte(hybridMountinfo + "50 31 0:40 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct", "cpuset": "/sys/fs/cgroup/cpuset",
		"freezer": "/sys/fs/cgroup/freezer", "name=systemd": "/sys/fs/cgroup/systemd",
		"net_cls": "/sys/fs/cgroup/net_cls,net_prio", "net_prio": "/sys/fs/cgroup/net_cls,net_prio",
	}
	if fmt.Sprint(l.v1) != fmt.Sprint(want) || l.v2 != "/sys/fs/cgroup/unified" || l.pureV2() {
		t.Errorf("hybrid: v1 %v v2 %q, want v1 %v v2 /sys/fs/cgroup/unified", l.v1, l.v2, want)
	}
	if h := l.hierarchies(); len(h) != 7 || h[len(h)-1] != "/sys/fs/cgroup/unified" {
		t.Errorf("hierarchies %v: want 6 v1 directories, each once, then the cgroup2 tree", h)
	}

	l, err = detectCgroups([]byte("30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"))
	if err != nil || l.v2 != "/sys/fs/cgroup" || !l.pureV2() {
		t.Errorf("pure v2: %+v, %v", l, err)
	}

	if _, err := detectCgroups([]byte("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")); err == nil {
		t.Error("no cgroup2 tree and no freezer: want an error")
	}
}

// TestCgroupCreateOnAFakeTree (directories standing in for cgroupfs): the node's cgroup and its
// system child in every hierarchy, cpuset's cpus and mems copied from the parent, the daemons'
// join files in the freezer and the cgroup2 tree only, and list finds the node by prefix.
func TestCgroupCreateOnAFakeTree(t *testing.T) {
	root := t.TempDir()
	l := cgroupLayout{v1: map[string]string{}}
	for _, c := range []string{"cpu", "cpuset", "freezer", "name=systemd"} {
		l.v1[c] = filepath.Join(root, strings.TrimPrefix(c, "name="))
	}
	l.v2 = filepath.Join(root, "unified")
	for _, h := range l.hierarchies() {
		if err := os.MkdirAll(h, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fakeProcSys(t, l.v1["cpuset"], map[string]string{"cpuset.cpus": "0-1", "cpuset.mems": "0"})

	if err := l.create("baton-node-2"); err != nil {
		t.Fatal(err)
	}
	if err := l.create("baton-node-2"); err != nil {
		t.Fatalf("create again: %v", err)
	}
	for _, h := range l.hierarchies() {
		if fi, err := os.Stat(filepath.Join(h, "baton-node-2", "system")); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, rel := range []string{"baton-node-2", "baton-node-2/system"} {
		if got := readSysctl(t, filepath.Join(l.v1["cpuset"], rel), "cpuset.cpus"); got != "0-1" {
			t.Errorf("%s cpuset.cpus = %q, want the parent's 0-1", rel, got)
		}
	}
	want := []string{filepath.Join(root, "freezer/baton-node-2/system/cgroup.procs"), filepath.Join(root, "unified/baton-node-2/system/cgroup.procs")}
	if got := l.joinFiles("baton-node-2"); !slices.Equal(got, want) {
		t.Errorf("joinFiles = %v, want %v", got, want)
	}
	if got := l.list("baton-node-"); !slices.Equal(got, []string{"baton-node-2"}) {
		t.Errorf("list = %v", got)
	}
}

// TestCgroupFreezeKillRemove runs on this machine's cgroups (root): a shell joins a fresh cgroup
// through the join files before it execs (as a node's daemons will) and forks a child; freeze
// reports the subtree frozen and thaw thawed; kill ends both processes, the forked one included;
// remove leaves no directory in any hierarchy.
func TestCgroupFreezeKillRemove(t *testing.T) {
	host := hostCgroups(t, "cgroups")
	layouts := map[string]cgroupLayout{"host": host}
	if host.v2 != "" && host.v1["freezer"] != "" {
		v1 := host
		v1.v2 = "" // as on a machine without a cgroup2 tree: the v1 freezer, SIGKILL after freezing
		layouts["v1 freezer only"] = v1
	}
	for what, l := range layouts {
		t.Run(what, func(t *testing.T) { freezeKillRemove(t, l, fmt.Sprintf("baton-cgtest-%d", os.Getpid())) })
	}
}

func freezeKillRemove(t *testing.T, l cgroupLayout, name string) {
	t.Cleanup(func() {
		_ = l.kill(name, 5*time.Second)
		_ = l.remove(name, 5*time.Second)
	})
	if err := l.create(name); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-c", `for f in "$@"; do echo $$ > "$f" || exit 1; done; sleep 300 & exec sleep 301`, "sh"}, l.joinFiles(name)...)
	cmd := exec.Command("sh", args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for len(pids) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the shell and its child are not both in %s: %v", name, pids)
		}
		time.Sleep(10 * time.Millisecond)
		pids = l.pids(name)
	}

	if err := l.freeze(name, true, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.freeze(name, false, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.freeze(name, true, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := l.kill(name, 5*time.Second); err != nil { // frozen: the harder case
		t.Fatal(err)
	}
	t.Logf("killed %v (frozen) in %s", pids, time.Since(start).Round(time.Millisecond))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the shell did not exit after kill")
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("process %d is still running after kill", pid)
		}
	}
	if err := l.remove(name, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if left := l.dirs(name); len(left) > 0 {
		t.Errorf("cgroups left after remove: %v", left)
	}
}

// hostCgroups is the preamble of the tests that create cgroups (and namespaces, for what) on this
// machine: it skips under -short, needs root (fails without it under CI=true, skips otherwise) and
// returns the machine's cgroup layout.
func hostCgroups(t *testing.T, what string) cgroupLayout {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: this test creates %s on this machine (make test runs it)", what)
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("needs root to create %s", what)
		}
		t.Skipf("needs root to create %s", what)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	l, err := detectCgroups(mi)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
