package localnode

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sandbox is a node's own network, mount and UTS namespaces and cgroup, without an image or a
// container runtime around them: a holder process (sh, then sleep) started in fresh namespaces
// keeps them alive, and the node's daemons enter them with nsenter after joining the node's
// cgroup (wrap). Killing the cgroup ends every process of the node, the holder included, and the
// kernel then frees the namespaces and whatever lives only in them (links, routes, iptables
// rules, mounts).
//
// It is the base of increment 1 of issue 27; no node runs in one yet.
//
// What it does not give: a pid namespace (the node's processes see the host's) or a private
// /sys or /proc (sysfs shows the host's interfaces); the mount namespace starts as a private
// copy of the host's, so the host's files are all visible inside.
type sandbox struct {
	name   string // the cgroup's name, baton-node-<i>
	cg     cgroupLayout
	holder *exec.Cmd
	exited chan struct{}
}

// newSandbox creates the cgroup name and starts the holder in it, in new network, mount and UTS
// namespaces, with hostname as its host name. The mount namespace's mounts are private (Go makes
// / rprivate in the child), so nothing mounted inside shows on the host. The holder dies with
// this process's thread that started it (Pdeathsig; see Go issue 27505), and with the cgroup.
func newSandbox(cg cgroupLayout, name, hostname string) (_ *sandbox, err error) {
	if strings.ContainsAny(hostname, "'\n") || hostname == "" {
		return nil, fmt.Errorf("localnode: bad host name %q", hostname)
	}
	if err := cg.create(name); err != nil {
		return nil, err
	}
	s := &sandbox{name: name, cg: cg, exited: make(chan struct{})}
	defer func() {
		if err != nil {
			s.destroy()
		}
	}()
	// The shell joins the cgroups before anything else runs in the namespaces, names the UTS
	// namespace (writing kernel.hostname in a UTS namespace changes only its own), brings up lo
	// and becomes sleep: the holder is one process from start to end.
	script := joinPrologue + "echo '" + hostname + "' > /proc/sys/kernel/hostname && ip link set lo up && exec sleep infinity"
	s.holder = exec.Command("sh", append([]string{"-c", script, "sh"}, joinArgs(cg.joinFiles(name))...)...)
	s.holder.SysProcAttr = &syscall.SysProcAttr{
		Unshareflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS,
		Setpgid:      true,
		Pdeathsig:    syscall.SIGKILL,
	}
	var out strings.Builder
	s.holder.Stdout, s.holder.Stderr = &out, &out
	if err := s.holder.Start(); err != nil {
		return nil, fmt.Errorf("localnode: starting the holder of %s: %w", name, err)
	}
	go func() {
		_ = s.holder.Wait()
		close(s.exited)
	}()
	// Ready once the holder is sleep: then it has joined, named and brought up lo.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			return nil, fmt.Errorf("localnode: the holder of %s exited: %s", name, strings.TrimSpace(out.String()))
		default:
		}
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", s.pid())); strings.TrimSpace(string(comm)) == "sleep" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("localnode: the holder of %s did not start within 10s", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// joinPrologue is the start of a shell script whose first argument is a count n, followed by n
// cgroup.procs files: it writes its own pid to each and shifts them off, so that "$@" is what
// follows. A process that joins this way is in the cgroups before it execs, and so is every
// process it forks later.
const joinPrologue = `n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; `

func joinArgs(files []string) []string {
	return append([]string{strconv.Itoa(len(files))}, files...)
}

func (s *sandbox) pid() int { return s.holder.Process.Pid }

// wrap returns the argv that runs argv inside the sandbox: in its cgroups (joined before exec)
// and its network, mount and UTS namespaces (nsenter, which execs argv: the pid of the wrapped
// process is argv's own once it runs, and signals to it reach argv).
func (s *sandbox) wrap(argv ...string) []string {
	script := joinPrologue + "exec nsenter --target " + strconv.Itoa(s.pid()) + ` --net --mount --uts -- "$@"`
	return append(append([]string{"sh", "-c", script, "sh"}, joinArgs(s.cg.joinFiles(s.name))...), argv...)
}

// run runs argv in the sandbox and returns its output; an error includes the output.
func (s *sandbox) run(ctx context.Context, argv ...string) ([]byte, error) {
	w := s.wrap(argv...)
	out, err := exec.CommandContext(ctx, w[0], w[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("localnode: in %s: %s: %w: %s", s.name, strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// privatePaths are the host paths a node's containerd or kubelet writes and cannot be told to
// move, each replaced inside the sandbox by a directory of the node's own (design §5):
// containerd's shim sockets (/run/containerd/s, on a tmpfs that dies with the mount namespace),
// libcni's result cache, the kubelet's device-plugin socket directory and its links to pod logs.
// The directories of the node's own are below dir/private, named by the last element.
var privatePaths = []struct {
	path  string
	tmpfs bool
}{
	{"/run/containerd", true},
	{"/var/lib/cni", false},
	{"/var/lib/kubelet/device-plugins", false},
	{"/var/log/containers", false},
}

// mountPrivate mounts privatePaths inside the sandbox: a tmpfs, or a bind mount of
// dir/private/<last element>. A mount point missing on the host is created (an empty directory,
// which removeHostFiles removes once empty). Nothing of it shows on the host, and it all goes
// with the mount namespace.
func (s *sandbox) mountPrivate(ctx context.Context, dir string) error {
	for _, p := range privatePaths {
		if err := os.MkdirAll(p.path, 0o755); err != nil {
			return fmt.Errorf("localnode: %w", err)
		}
		if p.tmpfs {
			if _, err := s.run(ctx, "mount", "-t", "tmpfs", "-o", "mode=0711", "baton-node", p.path); err != nil {
				return err
			}
			continue
		}
		own := filepath.Join(dir, "private", filepath.Base(p.path))
		if err := os.MkdirAll(own, 0o755); err != nil {
			return fmt.Errorf("localnode: %w", err)
		}
		if _, err := s.run(ctx, "mount", "--bind", own, p.path); err != nil {
			return err
		}
	}
	return nil
}

// destroy kills every process of the sandbox (the holder last among equals: all at once) and
// removes its cgroups. The kernel frees the namespaces when their last process is gone; destroy
// does not wait for that.
func (s *sandbox) destroy() error {
	killErr := s.cg.kill(s.name, 5*time.Second)
	if s.holder != nil && s.holder.Process != nil {
		_ = s.holder.Process.Kill() // if it never joined the cgroup
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
		}
	}
	if err := s.cg.remove(s.name, 5*time.Second); err != nil {
		return err
	}
	return killErr
}

// configureNetwork sets up the node's side of its network, inside the sandbox, once its link
// eth0 exists (the host's side, a veth on baton0, is the caller's): spec.IP/24 on eth0 with
// HostIP as the default route; the pod bridge with spec.PodGateway; a route to each peer's pod
// subnet through the peer's IP on the shared link (no overlay, as kindnet does); and forwarding
// and bridged traffic through iptables in the node's network namespace, so that kube-proxy's
// rules apply to pods on the same bridge. It does not make the host route to the node's pods.
func (s *sandbox) configureNetwork(ctx context.Context, spec NodeSpec, peers []NodeSpec) error {
	pods, err := netip.ParsePrefix(spec.PodSubnet)
	if err != nil {
		return fmt.Errorf("localnode: %s: pod subnet: %w", spec.Name, err)
	}
	nodes := netip.MustParsePrefix(NodeSubnet)
	steps := [][]string{
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", spec.IP, nodes.Bits()), "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", HostIP, "dev", "eth0"},
		{"ip", "link", "add", spec.Bridge, "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", spec.PodGateway, pods.Bits()), "dev", spec.Bridge},
		{"ip", "link", "set", spec.Bridge, "up"},
	}
	for _, p := range peers {
		if p.Name != spec.Name {
			steps = append(steps, []string{"ip", "route", "add", p.PodSubnet, "via", p.IP, "dev", "eth0"})
		}
	}
	for _, step := range steps {
		if _, err := s.run(ctx, step...); err != nil {
			return err
		}
	}
	// /proc/sys/net follows the writer's network namespace: these change the node's only.
	_, err = s.run(ctx, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward && "+
		"echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables && echo 1 > /proc/sys/net/bridge/bridge-nf-call-ip6tables")
	return err
}
