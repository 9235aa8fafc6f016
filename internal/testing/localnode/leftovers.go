package localnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Leftovers lists what a node leaves on this machine that cleanUp removes, one line per thing
// found: the bridge, BATON-* and KUBE-* iptables chains, the kubepods cgroups, mounts under
// BaseDir, processes whose command line names BaseDir, the pods' network namespaces, BaseDir
// itself, saved sysctls, and the files the components write outside BaseDir (stale sockets, CNI
// results, container log links; see hostFiles). Empty means the machine is as a node found it,
// as far as these checks see: the kernel settings' values are not compared (see saveSysctls), nor
// are empty directories a component made in /run, /var/lib or /var/log checked.
//
// Call it while no node runs (LockMachine): a running node is nothing but leftovers.
func Leftovers(ctx context.Context) []string {
	var found []string
	if out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if name == bridgeName || strings.HasPrefix(name, "batonv") {
				found = append(found, "link "+name)
			}
		}
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.CommandContext(ctx, cmd, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || strings.HasPrefix(f[1], "BATON-")) {
					found = append(found, fmt.Sprintf("%s chain %s/%s", cmd, table, f[1]))
				}
			}
		}
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/kubepods", "/sys/fs/cgroup/kubepods", "/sys/fs/cgroup/*/baton-node-*", "/sys/fs/cgroup/baton-node-*"} {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			found = append(found, "cgroup "+d)
		}
	}
	for _, p := range mountsUnder(BaseDir) {
		found = append(found, "mount "+p)
	}
	for _, pid := range processesMentioning(BaseDir) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		found = append(found, fmt.Sprintf("process %d %s", pid, bytes.ReplaceAll(bytes.TrimRight(cmdline, "\x00"), []byte{0}, []byte{' '})))
	}
	for _, ns := range cniNetns(ctx) {
		found = append(found, "netns "+ns)
	}
	for _, p := range []string{BaseDir, sysctlsSaved} {
		if fileExists(p) {
			found = append(found, "file "+p)
		}
	}
	for _, p := range hostFiles() {
		found = append(found, "file "+p)
	}
	return found
}

// hostFiles lists what the node's components leave outside BaseDir because they cannot be told
// to write elsewhere: containerd shims' sockets in /run/containerd/s (no longer listening), a
// stale NRI socket (from a node before NRI was switched off), libcni's cached results for the
// pod network "baton" and the same sandboxes' loopback in /var/lib/cni/results, the kubelet's links in /var/log/containers to pod
// logs under BaseDir, and its stale device-plugin socket.
func hostFiles() []string {
	var found []string
	for _, pattern := range []string{"/run/containerd/s/*", "/run/nri/nri.sock", "/var/lib/kubelet/device-plugins/kubelet.sock"} {
		socks, _ := filepath.Glob(pattern)
		for _, s := range socks {
			if staleSocket(s) {
				found = append(found, s)
			}
		}
	}
	results, _ := filepath.Glob("/var/lib/cni/results/baton-*-eth0")
	for _, r := range results {
		found = append(found, r)
		// containerd's loopback network of the same sandbox, which only the ID ties to the node
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(r), "baton-"), "-eth0")
		if lo := filepath.Join(filepath.Dir(r), "cni-loopback-"+id+"-lo"); fileExists(lo) {
			found = append(found, lo)
		}
	}
	links, _ := filepath.Glob("/var/log/containers/*")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, BaseDir+"/") {
			found = append(found, l)
		}
	}
	return found
}

// hostDirs are the directories of hostFiles, deepest first: cleanUp removes each once it is empty.
var hostDirs = []string{
	"/run/containerd/s", "/run/containerd", "/run/nri",
	"/var/lib/cni/results", "/var/lib/cni",
	"/var/lib/kubelet/device-plugins", "/var/lib/kubelet",
	"/var/log/containers",
}

// removeHostFiles removes hostFiles and then those of hostDirs that are empty.
func removeHostFiles() error {
	var errs []error
	for _, p := range hostFiles() {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("localnode: %w", err))
		}
	}
	for _, d := range hostDirs {
		_ = syscall.Rmdir(d) // only if empty; a directory in use by something else stays
	}
	return errors.Join(errs...)
}

// staleSocket reports whether path is a unix socket nothing listens on: a connection to it is
// refused. A socket something answers on, or one that cannot be probed, is not stale.
func staleSocket(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSocket == 0 {
		return false
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// mountsUnder lists the mount points at or below dir in this process's mount namespace.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	return points
}

// processesMentioning lists the processes other than this one whose command line contains marker.
func processesMentioning(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cniNetns lists the network namespaces named cni-* in /var/run/netns, where containerd put the
// pods' before netns_mounts_under_state_dir.
func cniNetns(ctx context.Context) []string {
	out, err := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "cni-") {
			names = append(names, name)
		}
	}
	return names
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
