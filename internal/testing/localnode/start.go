package localnode

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
	// Sandboxed runs the node in a sandbox of its own (issue 27): node 1 of the sandboxed layout,
	// baton-node-1 at 198.18.0.11 with its pods on 198.18.17.0/24, in its own network, mount and
	// UTS namespaces and cgroup root /baton-node-1, joined to the host by a veth on baton0. Off
	// (the default, unless the environment variable BATON_NODE_SANDBOX is 1): today's node,
	// baton-node, in the host's namespaces.
	Sandboxed bool
}

// sandboxEnv, set to 1, turns Options.Sandboxed on for every Start of the process, so that a test
// package runs on a sandboxed node without a change to its code.
const sandboxEnv = "BATON_NODE_SANDBOX"

// Node is a running single-node cluster: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, and on the node itself containerd with runc and CNI, the kubelet and
// kube-proxy.
type Node struct {
	// Config is the admin's client configuration (system:masters).
	Config *rest.Config
	// Kubeconfig is the path of the admin's kubeconfig, for kubectl and helm.
	Kubeconfig string
	// Dir is BaseDir; each component logs to Dir/logs/<component>.log.
	Dir string
	// Sandboxed reports whether the node runs in a sandbox of its own (Options.Sandboxed).
	Sandboxed bool

	o      Options
	cp     *controlPlane
	node   *kubeNode
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
	spec := singleNode()
	if o.Sandboxed || os.Getenv(sandboxEnv) == "1" {
		n.Sandboxed = true
		specs, err := sandboxedNodes(1)
		if err != nil {
			return nil, err
		}
		spec = specs[0]
		if err := setUpHostNetwork(ctx, specs); err != nil {
			return nil, err
		}
	} else if err := setUpNetwork(ctx); err != nil {
		return nil, err
	}
	n.cp = &controlPlane{dir: BaseDir, c: o.Components, progress: o.Progress}
	if err := n.cp.start(ctx); err != nil {
		return nil, err
	}
	n.Config, n.Kubeconfig = n.cp.config, n.cp.kubeconfig
	n.node = &kubeNode{spec: spec, dir: BaseDir, c: o.Components, pauseImage: o.PauseImage, progress: o.Progress}
	if err := n.node.start(ctx, n.cp, o.Images); err != nil {
		return nil, err
	}
	if err := waitForDefaultServiceAccount(ctx, n.cp.config); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "localnode: node %s Ready at %s after %s (logs in %s)\n", spec.Name, spec.IP, since(start), filepath.Join(BaseDir, "logs"))
	return n, nil
}

// Spec returns the running node's name, addresses and pod subnet.
func (n *Node) Spec() NodeSpec { return n.node.spec }

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
	if n.node != nil {
		n.node.stop()
	}
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

// ImportImage imports a docker-archive tarball into the containerd namespace the kubelet uses.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	return n.node.importImage(ctx, tarball)
}

// KillContainer sends SIGKILL to a container's process, as a crash would: containerID is a
// container status's ContainerID ("containerd://<id>"). The kubelet sees the container exit and
// applies the pod's restart policy.
func (n *Node) KillContainer(ctx context.Context, containerID string) error {
	return n.node.killContainer(ctx, containerID)
}

// EmptyDir returns the host directory of a pod's emptyDir volume, where the kubelet keeps it. It
// does not check that the pod or the volume exists.
func (n *Node) EmptyDir(podUID, volume string) string {
	return n.node.emptyDir(podUID, volume)
}
