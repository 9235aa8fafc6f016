package localnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/baton-dev/baton/internal/testing/filelock"
	"github.com/baton-dev/baton/internal/testing/localkube"
)

// Components are the binaries a node runs, each a path.
type Components struct {
	Etcd, KubeAPIServer, KubeControllerManager, KubeScheduler string
	Kubelet, KubeProxy                                        string
	// Containerd and Ctr are containerd's daemon and client; ShimDir holds
	// containerd-shim-runc-v2, which containerd finds on its PATH.
	Containerd, Ctr, ShimDir string
	Runc                     string
	// CNIBinDir holds the CNI plugins bridge, host-local, loopback and portmap.
	CNIBinDir string
}

// ComponentsOf returns the components from what localkube.Install (kubeBinDir: etcd,
// kube-apiserver, kube-controller-manager) and Install installed.
func ComponentsOf(kubeBinDir string, b Binaries) Components {
	return Components{
		Etcd:                  filepath.Join(kubeBinDir, localkube.Etcd),
		KubeAPIServer:         filepath.Join(kubeBinDir, localkube.KubeAPIServer),
		KubeControllerManager: filepath.Join(kubeBinDir, localkube.KubeControllerManager),
		KubeScheduler:         b.KubeScheduler,
		Kubelet:               b.Kubelet,
		KubeProxy:             b.KubeProxy,
		Containerd:            b.Containerd,
		Ctr:                   b.Ctr,
		ShimDir:               b.ShimDir,
		Runc:                  b.Runc,
		CNIBinDir:             b.CNIBinDir,
	}
}

// Options configure Start.
type Options struct {
	Components Components
	// PauseImage is the sandbox image of every pod; it must be in one of Images.
	PauseImage string
	// Images are docker-archive tarballs imported into containerd before the kubelet starts.
	Images []string
	// Progress receives a line per step. Default: discarded.
	Progress io.Writer
	// Unsandboxed runs the node of before instead of a sandboxed one: baton-node, in the host's
	// network, mount and UTS namespaces, with HostIP as its address and its pods on baton0 from
	// PodRangeStart to PodRangeEnd. The default (false) is node 1 of the sandboxed layout (issue
	// 27): baton-node-1 at 198.18.0.11 with its pods on 198.18.17.0/24, in its own network, mount
	// and UTS namespaces and cgroup root /baton-node-1, joined to the host by a veth on baton0.
	// The environment variable BATON_NODE_SANDBOX=0 sets it for every Start of the process.
	Unsandboxed bool
	// Nodes is how many sandboxed nodes the cluster has, 1 to MaxNodes (0: the environment
	// variable BATON_NODES, or 1 without it, so that a test package or the demo can be run on
	// more nodes without a change to its code). Node 1 starts
	// first and must start; the others start after it, side by side, and one that fails is
	// stopped and named in Node.Missing while the cluster goes on without it. More than one
	// node needs the sandbox (not Unsandboxed).
	Nodes int
}

// sandboxEnv, set to 0, turns Options.Unsandboxed on for every Start of the process, so that a
// test package or the demo runs on the unsandboxed node without a change to its code (for a
// machine that cannot run the sandbox, or to compare). Any other value, or none, leaves the
// default, the sandboxed node.
const sandboxEnv = "BATON_NODE_SANDBOX"

// nodesEnv, when Options.Nodes is 0, says how many nodes Start runs (1 to MaxNodes).
const nodesEnv = "BATON_NODES"

// nodeCount returns how many nodes Start runs: o.Nodes, or BATON_NODES, or 1.
func (o Options) nodeCount() (int, error) {
	if o.Nodes != 0 {
		return o.Nodes, nil
	}
	v := os.Getenv(nodesEnv)
	if v == "" {
		return 1, nil
	}
	count, err := strconv.Atoi(v)
	if err != nil || count < 1 || count > MaxNodes {
		return 0, fmt.Errorf("localnode: %s=%q: want 1 to %d", nodesEnv, v, MaxNodes)
	}
	return count, nil
}

// sandboxed reports whether Start runs its node in a sandbox: unless o.Unsandboxed or
// BATON_NODE_SANDBOX=0.
func (o Options) sandboxed() bool {
	return !o.Unsandboxed && os.Getenv(sandboxEnv) != "0"
}

// Node is a running cluster: etcd, kube-apiserver, kube-controller-manager and kube-scheduler,
// and on each node containerd with runc and CNI, the kubelet and kube-proxy. Its methods act on
// whichever node a pod or container is on. (It keeps the name Node from when a cluster had one
// node.)
type Node struct {
	// Config is the admin's client configuration (system:masters).
	Config *rest.Config
	// Kubeconfig is the path of the admin's kubeconfig, for kubectl and helm.
	Kubeconfig string
	// Dir is BaseDir; each component of the control plane and node 1 logs to
	// Dir/logs/<component>.log, those of node i ≥ 2 to Dir/nodes/<i>/logs/<component>.log.
	Dir string
	// Sandboxed reports whether the node runs in a sandbox of its own (the default; see
	// Options.Unsandboxed).
	Sandboxed bool

	// Missing names each node of Options.Nodes that did not start, with the reason; the cluster
	// runs on without it.
	Missing []string

	o      Options
	cp     *controlPlane
	nodes  []*kubeNode // the running nodes, node 1 first
	unlock func()
}

// Start clears what an earlier node left behind, starts a node and waits until it is Ready, its
// Service network is programmed, and the default namespace has its service account. ctx bounds
// the start only; Stop ends the node.
func Start(ctx context.Context, o Options) (_ *Node, err error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if err := CheckHost(); err != nil {
		return nil, err
	}
	if err := o.Components.check(); err != nil {
		return nil, err
	}
	start := time.Now()
	unlock, err := filelock.Lock(ctx, machineLock, func() {
		fmt.Fprintln(o.Progress, "localnode: another process runs a node on this machine; waiting for it to stop...")
	})
	if err != nil {
		return nil, fmt.Errorf("localnode: %w", err)
	}
	n := &Node{Dir: BaseDir, o: o, unlock: unlock}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := cleanUp(ctx, o.Components.KubeProxy); err != nil {
		return nil, fmt.Errorf("localnode: clearing what an earlier node left: %w", err)
	}
	if err := saveSysctls(procSys, sysctlsSaved, globalSysctls); err != nil {
		return nil, err
	}
	count, err := o.nodeCount()
	if err != nil {
		return nil, err
	}
	specs := []NodeSpec{singleNode()}
	if o.sandboxed() {
		n.Sandboxed = true
		if specs, err = sandboxedNodes(count); err != nil {
			return nil, err
		}
		if err := setUpHostNetwork(ctx, specs); err != nil {
			return nil, err
		}
	} else if count > 1 {
		return nil, fmt.Errorf("localnode: %d nodes need the sandbox, and Unsandboxed (or %s=0) asks for none", count, sandboxEnv)
	} else if err := setUpNetwork(ctx); err != nil {
		return nil, err
	}
	n.cp = &controlPlane{dir: BaseDir, c: o.Components, progress: o.Progress}
	if err := n.cp.start(ctx); err != nil {
		return nil, err
	}
	n.Config, n.Kubeconfig = n.cp.config, n.cp.kubeconfig
	first := n.newNode(specs[0], BaseDir)
	n.nodes = append(n.nodes, first)
	if err := first.start(ctx, n.cp, o.Images, specs); err != nil {
		return nil, err
	}
	n.startOthers(ctx, specs)
	if err := waitForDefaultServiceAccount(ctx, n.cp.config); err != nil {
		return nil, err
	}
	names := make([]string, len(n.nodes))
	for i, k := range n.nodes {
		names[i] = k.spec.Name + " at " + k.spec.IP
	}
	fmt.Fprintf(o.Progress, "localnode: %s Ready after %s (logs in %s)\n", strings.Join(names, ", "), since(start), filepath.Join(BaseDir, "logs"))
	return n, nil
}

// newNode returns the (not started) node of spec with its files under dir.
func (n *Node) newNode(spec NodeSpec, dir string) *kubeNode {
	return &kubeNode{spec: spec, dir: dir, c: n.o.Components, pauseImage: n.o.PauseImage, progress: n.o.Progress}
}

// startOthers starts nodes 2 and up of specs side by side, each under BaseDir/nodes/<i>, and adds
// those that are Ready to n.nodes, in order. A node that fails is stopped (its sandbox destroyed
// with everything in it) and named in n.Missing with its error.
func (n *Node) startOthers(ctx context.Context, specs []NodeSpec) {
	if len(specs) < 2 {
		return
	}
	others := make([]*kubeNode, len(specs)-1)
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, spec := range specs[1:] {
		others[i] = n.newNode(spec, filepath.Join(BaseDir, "nodes", strconv.Itoa(i+2)))
		wg.Go(func() { errs[i] = others[i].start(ctx, n.cp, n.o.Images, specs) })
	}
	wg.Wait()
	for i, k := range others {
		if errs[i] != nil {
			k.stop()
			n.Missing = append(n.Missing, fmt.Sprintf("%s: %v", k.spec.Name, errs[i]))
			fmt.Fprintf(n.o.Progress, "localnode: %s did not start; going on without it: %v\n", k.spec.Name, errs[i])
			continue
		}
		n.nodes = append(n.nodes, k)
	}
}

// Spec returns the first node's name, addresses and pod subnet (node 1 of a sandboxed cluster).
func (n *Node) Spec() NodeSpec { return n.nodes[0].spec }

// Specs returns the name, addresses and pod subnet of every running node, node 1 first; a node
// named in Missing is not among them.
func (n *Node) Specs() []NodeSpec {
	specs := make([]NodeSpec, len(n.nodes))
	for i, k := range n.nodes {
		specs[i] = k.spec
	}
	return specs
}

// machineLock serialises nodes on this machine: one runs at a time.
const machineLock = "/run/baton-node.lock"

// LockMachine waits (bounded by ctx) until no node runs on this machine and keeps another from
// starting until unlock is called: Start takes the same lock. A test holds it to look at the
// machine after Stop without a node of another process starting meanwhile.
func LockMachine(ctx context.Context) (unlock func(), err error) {
	unlock, err = filelock.Lock(ctx, machineLock, func() {})
	if err != nil {
		return nil, fmt.Errorf("localnode: %w", err)
	}
	return unlock, nil
}

func (c Components) check() error {
	var missing []string
	for name, path := range map[string]string{
		"etcd": c.Etcd, "kube-apiserver": c.KubeAPIServer, "kube-controller-manager": c.KubeControllerManager,
		"kube-scheduler": c.KubeScheduler, "kubelet": c.Kubelet, "kube-proxy": c.KubeProxy,
		"containerd": c.Containerd, "ctr": c.Ctr, "runc": c.Runc,
		"containerd-shim-runc-v2": filepath.Join(c.ShimDir, "containerd-shim-runc-v2"),
		"CNI bridge":              filepath.Join(c.CNIBinDir, "bridge"),
	} {
		if path == "" {
			missing = append(missing, name+" (no path)")
		} else if _, err := os.Stat(path); err != nil {
			missing = append(missing, name+" ("+path+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("localnode: binaries missing: %s; install them with make install-deps", strings.Join(missing, ", "))
	}
	return nil
}

// Stop stops every component, removes the pods' containers, mounts, network namespaces,
// iptables rules and the bridge, puts back the kernel settings the kubelet changed, and removes
// BaseDir unless the environment variable BATON_KEEP_NODE is set (then the logs and the rest of
// the machine's state stay for a look, until the next Start).
func (n *Node) Stop() {
	for i := len(n.nodes) - 1; i >= 0; i-- {
		n.nodes[i].stop()
	}
	n.nodes = nil
	if n.cp != nil {
		n.cp.stop()
	}
	if os.Getenv("BATON_KEEP_NODE") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := cleanUp(ctx, n.o.Components.KubeProxy); err != nil {
			fmt.Fprintf(n.o.Progress, "localnode: cleaning up: %v\n", err)
		}
		cancel()
	} else if err := restoreSysctls(procSys, sysctlsSaved); err != nil {
		fmt.Fprintf(n.o.Progress, "localnode: %v\n", err)
	}
	if n.unlock != nil {
		n.unlock()
		n.unlock = nil
	}
}

// ImportImage imports a docker-archive tarball into the containerd namespace the kubelet uses,
// on every running node.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	for _, k := range n.nodes {
		if err := k.importImage(ctx, tarball); err != nil {
			return err
		}
	}
	return nil
}

// KillContainer sends SIGKILL to a container's process, as a crash would: containerID is a
// container status's ContainerID ("containerd://<id>"), on whichever node runs it. The kubelet
// sees the container exit and applies the pod's restart policy.
func (n *Node) KillContainer(ctx context.Context, containerID string) error {
	var errs []error
	for _, k := range n.nodes {
		err := k.killContainer(ctx, containerID)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// EmptyDir returns the host directory of a pod's emptyDir volume, where the kubelet of the node
// that runs the pod keeps it (the first node's if no node has the pod). It does not check that the
// volume exists.
func (n *Node) EmptyDir(podUID, volume string) string {
	for _, k := range n.nodes {
		if _, err := os.Stat(k.podDir(podUID)); err == nil {
			return k.emptyDir(podUID, volume)
		}
	}
	return n.nodes[0].emptyDir(podUID, volume)
}
