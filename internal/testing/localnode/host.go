package localnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The node's network. It exists only inside this machine: a bridge whose addresses come from
// 198.18.0.0/15, the range reserved for benchmarking network devices (RFC 2544), so that nothing
// the node does can reach or shadow a real network.
const (
	// NodeName is the node's name in the API.
	NodeName = "baton-node"
	// HostIP is the host's address on the pod bridge: the node's InternalIP, where the API server
	// listens and what pods reach the host by.
	HostIP = "198.18.0.1"
	// PodSubnet is the pod network; pods get addresses from PodRangeStart to PodRangeEnd.
	PodSubnet     = "198.18.0.0/16"
	PodRangeStart = "198.18.1.1"
	PodRangeEnd   = "198.18.1.254"
	// ServiceSubnet is the range of Service cluster IPs; KubernetesServiceIP is the API server's
	// Service (kubernetes.default), the first address of the range.
	ServiceSubnet       = "198.19.0.0/16"
	KubernetesServiceIP = "198.19.0.1"

	bridgeName = "baton0"
	// benchmarkRange holds every address of the node's network (RFC 2544's range).
	benchmarkRange = "198.18.0.0/15"
	hostPrefix     = "/16"
)

// BaseDir holds everything a running node writes: certificates, etcd's data, containerd's root and
// state, the kubelet's root, CNI configuration and logs. One node runs on a machine at a time
// (the bridge, the iptables rules and the kubepods cgroups are machine-wide), so the directory is
// fixed, and Start clears what a node that was not stopped left behind.
const BaseDir = "/var/lib/baton-node"

// CheckHost reports what this machine lacks to run a node: root, the kernel's bridge netfilter
// and overlayfs, and the commands ip and, for the sandboxed node (the default), nsenter. nil
// means it can. It does not check runc and iptables (Install does) nor the cgroup files a
// sandbox needs (Start reports those).
func CheckHost() error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the node runs containers, creates a bridge and writes iptables rules)")
	}
	if _, err := os.Stat("/proc/sys/net/bridge/bridge-nf-call-iptables"); err != nil {
		missing = append(missing, "the kernel's bridge netfilter (/proc/sys/net/bridge/bridge-nf-call-iptables; modprobe br_netfilter)")
	}
	if fss, err := os.ReadFile("/proc/filesystems"); err != nil || !bytes.Contains(fss, []byte("\toverlay\n")) {
		missing = append(missing, "overlayfs (modprobe overlay)")
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		missing = append(missing, "cgroups at /sys/fs/cgroup")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		missing = append(missing, "ip (Debian package iproute2)")
	}
	if (Options{}).sandboxed() {
		if _, err := exec.LookPath("nsenter"); err != nil {
			missing = append(missing, "nsenter (Debian package util-linux), for the node's sandbox (or run the unsandboxed node: BATON_NODE_SANDBOX=0)")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("localnode: this machine cannot run a node; missing: %s", strings.Join(missing, "; "))
}

// setUpNetwork makes the host ready for pods: forwarding on, bridged traffic through iptables (so
// that Service addresses are translated between pods on one bridge), and the bridge with HostIP.
func setUpNetwork(ctx context.Context) error {
	for key, value := range map[string]string{
		"net/ipv4/ip_forward":                 "1",
		"net/bridge/bridge-nf-call-iptables":  "1",
		"net/bridge/bridge-nf-call-ip6tables": "1",
	} {
		if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
			return fmt.Errorf("localnode: sysctl %s=%s: %w", strings.ReplaceAll(key, "/", "."), value, err)
		}
	}
	if err := run(ctx, "ip", "link", "show", bridgeName); err != nil {
		if err := run(ctx, "ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	if err := run(ctx, "ip", "addr", "replace", HostIP+hostPrefix, "dev", bridgeName); err != nil {
		return err
	}
	if err := run(ctx, "ip", "link", "set", bridgeName, "up"); err != nil {
		return err
	}
	// Service addresses live on the bridge too: before kube-proxy has programmed a Service (or
	// after it is gone), a packet to its address stays on this machine instead of following the
	// default route out of it.
	if err := run(ctx, "ip", "route", "replace", ServiceSubnet, "dev", bridgeName, "src", HostIP); err != nil {
		return err
	}
	return containPods(ctx, false)
}

// setUpHostNetwork makes the host's side of sandboxed nodes' network (design §4): the bridge
// baton0 with HostIP on NodeSubnet (a /24: the nodes' link, not the pods'), a route to each node's
// pod subnet through the node's IP, the Service network through the first node, whose kube-proxy
// translates the host's Service traffic (and masquerades it, the host being outside the cluster
// CIDR, so that answers come back the same way), and the fence chain, letting frames between nodes
// pass; the rest of 198.18.0.0/15 is routed to baton0 as well, so that no address of the range
// leaves the machine. Each node's own link is attach's. It changes no sysctl of the host: nothing of the
// nodes' traffic is forwarded by the host, only bridged.
//
// The routes exist before the nodes do; until a node is attached, traffic to its pods or (node 1)
// to a Service gets no answer but stays on baton0.
func setUpHostNetwork(ctx context.Context, nodes []NodeSpec) error {
	if len(nodes) == 0 {
		return errors.New("localnode: a host network for no node")
	}
	if err := run(ctx, "ip", "link", "show", bridgeName); err != nil {
		if err := run(ctx, "ip", "link", "add", bridgeName, "type", "bridge"); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"ip", "addr", "replace", HostIP + "/" + strings.Split(NodeSubnet, "/")[1], "dev", bridgeName},
		{"ip", "link", "set", bridgeName, "up"},
		// The rest of 198.18.0.0/15 (no node, pod or Service there) stays on baton0 too, where
		// nothing answers, instead of following the default route off the machine.
		{"ip", "route", "replace", benchmarkRange, "dev", bridgeName, "src", HostIP},
	}
	for _, n := range nodes {
		steps = append(steps, []string{"ip", "route", "replace", n.PodSubnet, "via", n.IP, "dev", bridgeName, "onlink"})
	}
	steps = append(steps, []string{"ip", "route", "replace", ServiceSubnet, "via", nodes[0].IP, "dev", bridgeName, "onlink"})
	for _, step := range steps {
		if err := run(ctx, step[0], step[1:]...); err != nil {
			return err
		}
	}
	return containPods(ctx, true)
}

// fenceChain is the iptables chain that keeps the pods' traffic on this machine: pods reach each
// other, Services and the host, and nothing beyond it.
const fenceChain = "BATON-NODE"

// containPods makes fenceChain and jumps to it first in FORWARD: what comes in on the bridge and
// would leave by another link is rejected. With betweenPorts, frames between two ports of the
// bridge (sandboxed nodes talking to each other, which the kernel passes through FORWARD when
// bridged traffic goes through iptables) are accepted first, so that a FORWARD policy of DROP does
// not cut the nodes apart. Today's single node is left as it was, without it.
func containPods(ctx context.Context, betweenPorts bool) error {
	if err := run(ctx, "iptables", "-w", "-N", fenceChain); err != nil {
		return err
	}
	if betweenPorts {
		if err := run(ctx, "iptables", "-w", "-A", fenceChain, "-i", bridgeName, "-o", bridgeName, "-j", "ACCEPT"); err != nil {
			return err
		}
	}
	if err := run(ctx, "iptables", "-w", "-A", fenceChain, "-i", bridgeName, "!", "-o", bridgeName, "-j", "REJECT"); err != nil {
		return err
	}
	return run(ctx, "iptables", "-w", "-I", "FORWARD", "1", "-j", fenceChain)
}

// cleanUp removes what a node left on the machine, whether it stopped or crashed: its processes
// (container shims included), sandboxed nodes (removeNodeSandboxes), the containers (every process
// in the kubepods cgroups), mounts
// under BaseDir, the pods' network namespaces, kube-proxy's iptables rules, the bridge, what the
// components leave outside BaseDir (hostFiles) and BaseDir, and it puts back the sysctls Start
// saved. It keeps going after an error and returns them all. Leftovers lists what it removes.
func cleanUp(ctx context.Context, kubeProxy string) error {
	var errs []error
	killMatching(BaseDir)
	errs = append(errs, removeNodeSandboxes(ctx))
	errs = append(errs, killCgroupTree("kubepods"))
	errs = append(errs, unmountUnder(BaseDir))
	for _, name := range cniNetns(ctx) { // nodes before netns_mounts_under_state_dir
		errs = append(errs, run(ctx, "ip", "netns", "delete", name))
	}
	if kubeProxy != "" {
		if _, err := exec.LookPath("iptables"); err == nil {
			// kube-proxy --cleanup removes its chains and rules; it reports rules it did not find
			// as errors, which after a clean stop is expected.
			_ = exec.CommandContext(ctx, kubeProxy, "--cleanup").Run()
		}
	}
	errs = append(errs, removeKubeletChains(ctx))
	if err := run(ctx, "ip", "link", "show", bridgeName); err == nil {
		errs = append(errs, run(ctx, "ip", "link", "delete", bridgeName))
	}
	errs = append(errs, removeHostFiles())
	if err := os.RemoveAll(BaseDir); err != nil {
		errs = append(errs, fmt.Errorf("localnode: removing %s: %w", BaseDir, err))
	}
	errs = append(errs, restoreSysctls(procSys, sysctlsSaved))
	return errors.Join(errs...)
}

// removeNodeSandboxes ends what sandboxed nodes left on the machine, running or crashed: every
// process in a baton-node-* cgroup and below (thawed first, so that the processes of a node that
// was frozen die too; the holders among them, so that the kernel frees the nodes' namespaces with
// whatever lives only there), then the cgroups in every hierarchy, then every host link batonv*
// still there: a node's veth pair outlives the kill until the kernel has freed the namespace, and
// for as long as a process outside the cgroups (none of a node's should be) keeps it. It keeps
// going after an error and returns them all.
func removeNodeSandboxes(ctx context.Context) error {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	l, _ := detectCgroups(mi) // with neither a cgroup2 tree nor a freezer, kill signals each pid
	var errs []error
	for _, name := range l.list(nodeCgroupPrefix) {
		l.thaw(name)
		errs = append(errs, l.kill(name, 5*time.Second), l.remove(name, 5*time.Second))
	}
	for _, link := range linkNames(ctx, hostLinkPrefix) {
		// Gone meanwhile (the kernel freed its namespace) is no error.
		if err := run(ctx, "ip", "link", "delete", link); err != nil && slices.Contains(linkNames(ctx, hostLinkPrefix), link) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// linkNames lists the network links of this process's namespace whose names start with prefix.
func linkNames(ctx context.Context, prefix string) []string {
	out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		// "5: batonv1@if2: <BROADCAST,...": the name, then @ and the peer's index for a veth
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}

// kubeletChains are the iptables chains the kubelet itself creates (kube-proxy --cleanup removes
// only kube-proxy's): a canary it watches to notice a flush, a hint for the iptables mode, and a
// firewall rule that drops packets to 127.0.0.0/8 from other sources; and the node's own
// fenceChain.
var kubeletChains = []string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT", fenceChain}

// removeKubeletChains deletes the rules that jump to kubeletChains (and to fenceChain) and then the chains, in the
// filter, nat and mangle tables, for IPv4 and IPv6. Missing commands or chains are not errors.
func removeKubeletChains(ctx context.Context) error {
	var errs []error
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			continue
		}
		for _, table := range []string{"filter", "nat", "mangle"} {
			out, err := exec.CommandContext(ctx, cmd, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue // the table does not exist here
			}
			present := map[string]bool{}
			var jumps [][]string
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				switch {
				case len(f) == 2 && f[0] == "-N" && slices.Contains(kubeletChains, f[1]):
					present[f[1]] = true
				case len(f) >= 4 && f[0] == "-A" && !slices.Contains(kubeletChains, f[1]) && slices.Contains(kubeletChains, f[len(f)-1]) && f[len(f)-2] == "-j":
					jumps = append(jumps, f[1:])
				}
			}
			for _, rule := range jumps {
				// -S prints comments quoted; rules the kubelet adds to built-in chains have none.
				errs = append(errs, run(ctx, cmd, append([]string{"-w", "-t", table, "-D"}, rule...)...))
			}
			for _, chain := range kubeletChains {
				if present[chain] {
					errs = append(errs, run(ctx, cmd, "-w", "-t", table, "-F", chain), run(ctx, cmd, "-w", "-t", table, "-X", chain))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// killMatching sends SIGKILL to every process other than this one whose command line mentions
// marker, and waits up to a few seconds for them to go.
func killMatching(marker string) {
	pids := processesMentioning(marker)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := bytes.Cut(stat, []byte(") "))
	return len(rest) > 0 && rest[0] == 'Z'
}

// killCgroupTree kills every process in the cgroup name (and below) of each cgroup hierarchy and
// then removes the cgroups, deepest first.
func killCgroupTree(name string) error {
	roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", name))
	if fi, err := os.Stat(filepath.Join("/sys/fs/cgroup", name)); err == nil && fi.IsDir() {
		roots = append(roots, filepath.Join("/sys/fs/cgroup", name)) // cgroup v2
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for _, dir := range dirs {
			procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		slices.Reverse(dirs) // children before their parents
		for _, dir := range dirs {
			if err := removeCgroupDir(dir, time.Now().Add(5*time.Second)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) error {
	points := mountsUnder(dir)
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("localnode: unmounting %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs a command and returns its output in the error when it fails.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("localnode: %s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// removeCgroupDir removes the empty cgroup directory dir, trying again until deadline while
// processes that were killed are still leaving it; a directory already gone is no error.
func removeCgroupDir(dir string, deadline time.Time) error {
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("localnode: removing cgroup %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
