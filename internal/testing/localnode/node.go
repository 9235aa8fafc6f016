package localnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/baton-dev/baton/internal/testing/freeport"
)

// kubeNode is the node's half of a running cluster: containerd with runc and CNI, the kubelet
// and kube-proxy, configured by spec, with every file under dir:
//
//	dir/containerd/   containerd's config, root, state (pod netns under state/io.containerd.grpc.v1.cri/netns), socket
//	dir/kubelet/      the kubelet's root-dir (pods, emptyDirs) and pki/ (its serving certificate)
//	dir/kube-proxy/   kube-proxy's config
//	dir/cni/          net.d/ (the CNI config) and ipam/ (host-local's leases)
//	dir/pki/, dir/kubeconfig/  the kubelet's and kube-proxy's client identities
//	dir/pod-logs/     the pods' logs
//	dir/logs/         the components' logs
//
// The first node has dir = BaseDir, shared with the control plane; node i ≥ 2 of a sandboxed
// cluster has BaseDir/nodes/<i>.
type kubeNode struct {
	spec       NodeSpec
	dir        string
	c          Components
	pauseImage string
	progress   io.Writer
	procs      []*process // in start order
	// sb is the node's sandbox, nil for a node in the host's namespaces (spec.HostLink "").
	sb *sandbox
}

// start writes the node's certificates and configuration, makes its sandbox if it has one (with
// routes to the pod subnets of peers), starts containerd, imports images,
// starts the kubelet and waits until the API server reports the node Ready, then starts
// kube-proxy and waits for its health check. The processes it started are in n.procs even when
// it fails, for stop.
func (n *kubeNode) start(ctx context.Context, cp *controlPlane, images []string, peers []NodeSpec) error {
	files, err := n.writeConfig(cp.ca)
	if err != nil {
		return err
	}
	if n.spec.HostLink != "" {
		if err := n.enterSandbox(ctx, peers); err != nil {
			return err
		}
	}
	path := "PATH=" + n.c.ShimDir + ":" + filepath.Dir(n.c.Runc) + ":" + os.Getenv("PATH")
	containerd, err := n.startContainerd(ctx, files, path)
	if err != nil {
		return err
	}
	for _, tarball := range images {
		if err := n.importImage(ctx, tarball); err != nil {
			return err
		}
	}
	if err := n.startKubelet(ctx, cp, files, path, containerd); err != nil {
		return err
	}
	return n.startProxy(ctx, cp, files, path)
}

// enterSandbox makes the node's sandbox (its cgroup root in every hierarchy, the holder of its
// namespaces), joins it to the host bridge with routes to the pods of peers (the cluster's
// nodes, this one included) and mounts its private paths, so that the daemons
// startProcess starts from then on run inside. The sandbox is in n.sb even when a later step
// fails, for stop.
func (n *kubeNode) enterSandbox(ctx context.Context, peers []NodeSpec) error {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	l, err := detectCgroups(mi)
	if err != nil {
		return err
	}
	step := time.Now()
	n.sb, err = newSandbox(l, strings.TrimPrefix(n.spec.CgroupRoot, "/"), n.spec.Name)
	if err != nil {
		return err
	}
	if err := n.sb.attach(ctx, n.spec, peers); err != nil {
		return err
	}
	if err := n.sb.mountPrivate(ctx, n.dir); err != nil {
		return err
	}
	fmt.Fprintf(n.progress, "localnode: sandbox of %s up at %s in %s\n", n.spec.Name, n.spec.IP, since(step))
	return nil
}

// writeConfig signs the node's identities with the cluster's CA (the kubelet's serving
// certificate for spec.IP, its client certificate system:node:<Name>, kube-proxy's client
// certificate) and writes them with the CNI configuration under dir.
func (n *kubeNode) writeConfig(ca *authority) (configFiles, error) {
	serving, err := ca.serving(n.spec.Name, []string{n.spec.Name}, []net.IP{net.ParseIP(n.spec.IP)})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"kubelet/pki/kubelet.crt": serving.Cert, "kubelet/pki/kubelet.key": serving.Key}
	if err := signClient(ca, files, "kubelet", "system:node:"+n.spec.Name, "system:nodes"); err != nil {
		return nil, err
	}
	if err := signClient(ca, files, "kube-proxy", "system:kube-proxy"); err != nil {
		return nil, err
	}
	cni, err := cniConfig(n.spec, filepath.Join(n.dir, "cni", "ipam"))
	if err != nil {
		return nil, err
	}
	files["cni/net.d/10-baton.conflist"] = cni
	return writePrivateFiles(n.dir, files)
}

func (n *kubeNode) containerdSocket() string {
	return filepath.Join(n.dir, "containerd", "containerd.sock")
}

// startContainerd starts containerd and waits until ctr reaches it.
func (n *kubeNode) startContainerd(ctx context.Context, files configFiles, path string) (*process, error) {
	ctrDir := filepath.Join(n.dir, "containerd")
	conf := containerdConfig(ctrDir, n.c.Runc, n.c.CNIBinDir, filepath.Dir(files["cni/net.d/10-baton.conflist"]), n.pauseImage)
	confFiles, err := writePrivateFiles(ctrDir, map[string][]byte{"config.toml": conf})
	if err != nil {
		return nil, err
	}
	step := time.Now()
	containerd, err := n.startProcess("containerd", n.c.Containerd, []string{"--config", confFiles["config.toml"], "--log-level", "warn"}, path)
	if err != nil {
		return nil, err
	}
	ctrVersion := func(ctx context.Context) error {
		return exec.CommandContext(ctx, n.c.Ctr, "--address", n.containerdSocket(), "version").Run()
	}
	if err := waitFor(ctx, "containerd", 100*time.Millisecond, ctrVersion, containerd); err != nil {
		return nil, err
	}
	fmt.Fprintf(n.progress, "localnode: containerd up in %s\n", since(step))
	return containerd, nil
}

// startKubelet starts the kubelet and waits until the API server reports the node Ready.
func (n *kubeNode) startKubelet(ctx context.Context, cp *controlPlane, files configFiles, path string, containerd *process) error {
	kubeconfig, err := cp.writeKubeconfig(n.dir, "kubelet", files["pki/kubelet.crt"], files["pki/kubelet.key"])
	if err != nil {
		return err
	}
	kubeletDir := filepath.Join(n.dir, "kubelet")
	kcFiles, err := writePrivateFiles(kubeletDir, map[string][]byte{
		"config.yaml": kubeletConfig(n.spec, n.containerdSocket(), cp.files["pki/ca.crt"], filepath.Join(kubeletDir, "pki"), filepath.Join(n.dir, "pod-logs")),
	})
	if err != nil {
		return err
	}
	step := time.Now()
	args := flags(
		"config", kcFiles["config.yaml"], "kubeconfig", kubeconfig,
		"root-dir", kubeletDir, "cert-dir", filepath.Join(kubeletDir, "pki"),
		"hostname-override", n.spec.Name, "node-ip", n.spec.IP,
		"v", "1",
	)
	if n.spec.Role != "" {
		args = append(args, "--node-labels", NodeRoleLabel+"="+n.spec.Role)
	}
	kubelet, err := n.startProcess("kubelet", n.c.Kubelet, args, path)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cp.config)
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	if err := waitFor(ctx, "node "+n.spec.Name+" Ready", 250*time.Millisecond, nodeReady(client, n.spec.Name), kubelet, containerd); err != nil {
		return err
	}
	fmt.Fprintf(n.progress, "localnode: kubelet registered %s and it is Ready in %s\n", n.spec.Name, since(step))
	return nil
}

// startProxy starts kube-proxy and waits for its health check, which passes once it has
// programmed the Services.
func (n *kubeNode) startProxy(ctx context.Context, cp *controlPlane, files configFiles, path string) error {
	kubeconfig, err := cp.writeKubeconfig(n.dir, "kube-proxy", files["pki/kube-proxy.crt"], files["pki/kube-proxy.key"])
	if err != nil {
		return err
	}
	pcFiles, err := writePrivateFiles(filepath.Join(n.dir, "kube-proxy"), map[string][]byte{"config.yaml": kubeProxyConfig(n.spec, kubeconfig)})
	if err != nil {
		return err
	}
	step := time.Now()
	proxy, err := n.startProcess("kube-proxy", n.c.KubeProxy, []string{"--config", pcFiles["config.yaml"]}, path)
	if err != nil {
		return err
	}
	healthz := "http://" + net.JoinHostPort(n.spec.HealthzIP, "10256") + "/healthz"
	if err := waitFor(ctx, "kube-proxy", 200*time.Millisecond, httpOK(http.DefaultClient, healthz), proxy); err != nil {
		return err
	}
	fmt.Fprintf(n.progress, "localnode: kube-proxy programs Services in iptables mode (up in %s)\n", since(step))
	return nil
}

// waitForDefaultServiceAccount waits until the controller manager has made the default
// namespace's service account, without which no pod there is admitted.
func waitForDefaultServiceAccount(ctx context.Context, config *rest.Config) error {
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	return waitFor(ctx, "the default service account", 200*time.Millisecond, func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// importImage imports a docker-archive tarball into the containerd namespace the kubelet uses.
func (n *kubeNode) importImage(ctx context.Context, tarball string) error {
	step := time.Now()
	out, err := exec.CommandContext(ctx, n.c.Ctr, "--address", n.containerdSocket(), "--namespace", "k8s.io",
		"images", "import", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("localnode: importing %s into containerd: %w: %s", tarball, err, strings.TrimSpace(string(out)))
	}
	fmt.Fprintf(n.progress, "localnode: imported %s in %s\n", filepath.Base(tarball), since(step))
	return nil
}

// killContainer sends SIGKILL to a container's process through the node's containerd.
func (n *kubeNode) killContainer(ctx context.Context, containerID string) error {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok || id == "" {
		return fmt.Errorf("localnode: container ID %q is not containerd://<id>", containerID)
	}
	out, err := exec.CommandContext(ctx, n.c.Ctr, "--address", n.containerdSocket(), "--namespace", "k8s.io",
		"tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("localnode: killing container %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// podDir returns where the node's kubelet keeps a pod's volumes and state.
func (n *kubeNode) podDir(podUID string) string {
	return filepath.Join(n.dir, "kubelet", "pods", podUID)
}

// emptyDir returns where the node's kubelet keeps a pod's emptyDir volume.
func (n *kubeNode) emptyDir(podUID, volume string) string {
	return filepath.Join(n.podDir(podUID), "volumes", "kubernetes.io~empty-dir", volume)
}

// startProcess starts a daemon of the node, inside its sandbox if it has one (the pid is the
// daemon's own once nsenter has exec'd it, so stopping it works the same).
func (n *kubeNode) startProcess(name, bin string, args []string, env ...string) (*process, error) {
	if n.sb != nil {
		argv := n.sb.wrap(append([]string{bin}, args...)...)
		bin, args = argv[0], argv[1:]
	}
	p, err := startProcess(n.dir, name, bin, args, env...)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

// stop stops the node's daemons, last started first. The pods' containers outlive it (their
// shims are not the daemons' children): cleanUp ends them, or, for a sandboxed node, stop
// itself, by destroying the sandbox with everything in it.
func (n *kubeNode) stop() {
	stopAll(n.procs)
	n.procs = nil
	if n.sb != nil {
		if err := n.sb.destroy(); err != nil {
			fmt.Fprintf(n.progress, "localnode: %v\n", err)
		}
		n.sb = nil
	}
}

func httpOK(c *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
		}
		return nil
	}
}

// nodeReady returns a check that passes once the node named name is registered and Ready.
func nodeReady(client kubernetes.Interface, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errors.New("not registered yet")
		}
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("%w: %s: %s", errNotReady, c.Reason, c.Message)
			}
		}
		return errNotReady
	}
}

func freePort(host string) (int, error) {
	p, err := freeport.Port(host)
	if err != nil {
		return 0, fmt.Errorf("localnode: a free port on %s: %w", host, err)
	}
	return p, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }
