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
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/baton-dev/baton/internal/testing/filelock"
	"github.com/baton-dev/baton/internal/testing/freeport"
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
}

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

	o      Options
	procs  []*process // in start order
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
	unlock, err := filelock.Lock(ctx, "/run/baton-node.lock", func() {
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
	if err := setUpNetwork(ctx); err != nil {
		return nil, err
	}
	files, err := n.writeConfig()
	if err != nil {
		return nil, err
	}
	if err := n.startControlPlane(ctx, files); err != nil {
		return nil, err
	}
	if err := n.startNode(ctx, files); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "localnode: node %s Ready at %s after %s (logs in %s)\n", NodeName, HostIP, since(start), filepath.Join(BaseDir, "logs"))
	return n, nil
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

// configFiles are the paths of what writeConfig wrote, by name.
type configFiles map[string]string

func (n *Node) writeConfig() (configFiles, error) {
	ca, err := newAuthority()
	if err != nil {
		return nil, err
	}
	hostIP := net.ParseIP(HostIP)
	server, err := ca.serving("kube-apiserver",
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{hostIP, net.ParseIP(KubernetesServiceIP), net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	kubeletServing, err := ca.serving(NodeName, []string{NodeName}, []net.IP{hostIP})
	if err != nil {
		return nil, err
	}
	saPrivate, saPublic, err := serviceAccountKey()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		"pki/ca.crt": ca.PEM, "pki/apiserver.crt": server.Cert, "pki/apiserver.key": server.Key,
		"pki/sa.key": saPrivate, "pki/sa.pub": saPublic,
		"kubelet/pki/kubelet.crt": kubeletServing.Cert, "kubelet/pki/kubelet.key": kubeletServing.Key,
	}
	// One identity per component, with the groups the API server's bootstrap RBAC expects.
	for name, id := range map[string][]string{
		"admin":                   {"baton-node-admin", "system:masters"},
		"kube-controller-manager": {"system:kube-controller-manager"},
		"kube-scheduler":          {"system:kube-scheduler"},
		"kubelet":                 {"system:node:" + NodeName, "system:nodes"},
		"kube-proxy":              {"system:kube-proxy"},
		"apiserver-kubelet":       {"kube-apiserver-kubelet-client", "system:masters"},
	} {
		pair, err := ca.client(id[0], id[1:]...)
		if err != nil {
			return nil, err
		}
		files["pki/"+name+".crt"], files["pki/"+name+".key"] = pair.Cert, pair.Key
	}
	cni, err := cniConfig(filepath.Join(BaseDir, "cni", "ipam"))
	if err != nil {
		return nil, err
	}
	files["cni/net.d/10-baton.conflist"] = cni
	paths, err := writePrivateFiles(BaseDir, files)
	if err != nil {
		return nil, err
	}
	return paths, nil
}

// kubeconfigFor writes the kubeconfig of the named identity (see writeConfig) for server.
func (n *Node) kubeconfigFor(files configFiles, name, server string) (string, error) {
	p := filepath.Join(BaseDir, "kubeconfig", name+".yaml")
	data := kubeconfig(server, files["pki/ca.crt"], files["pki/"+name+".crt"], files["pki/"+name+".key"])
	if _, err := writePrivateFiles(filepath.Dir(p), map[string][]byte{filepath.Base(p): data}); err != nil {
		return "", err
	}
	return p, nil
}

func (n *Node) startControlPlane(ctx context.Context, files configFiles) error {
	c := n.o.Components
	clientPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	peerPort, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	step := time.Now()
	etcd, err := n.start("etcd", c.Etcd, flags(
		"data-dir", filepath.Join(BaseDir, "etcd"),
		"listen-client-urls", etcdURL, "advertise-client-urls", etcdURL,
		"listen-peer-urls", peerURL, "initial-advertise-peer-urls", peerURL,
		"initial-cluster", "default="+peerURL,
		"unsafe-no-fsync", "true", // a throwaway cluster: durability buys nothing and costs seconds
		"log-level", "warn",
	))
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "etcd", 100*time.Millisecond, httpOK(http.DefaultClient, etcdURL+"/health"), etcd); err != nil {
		return err
	}
	fmt.Fprintf(n.o.Progress, "localnode: etcd up in %s\n", since(step))

	apiPort, err := freePort(HostIP)
	if err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(HostIP, strconv.Itoa(apiPort))
	step = time.Now()
	api, err := n.start("kube-apiserver", c.KubeAPIServer, flags(
		"etcd-servers", etcdURL,
		"bind-address", HostIP, "advertise-address", HostIP, "secure-port", strconv.Itoa(apiPort),
		"service-cluster-ip-range", ServiceSubnet,
		"tls-cert-file", files["pki/apiserver.crt"], "tls-private-key-file", files["pki/apiserver.key"],
		"client-ca-file", files["pki/ca.crt"],
		"kubelet-client-certificate", files["pki/apiserver-kubelet.crt"], "kubelet-client-key", files["pki/apiserver-kubelet.key"],
		"kubelet-preferred-address-types", "InternalIP",
		"service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"service-account-key-file", files["pki/sa.pub"], "service-account-signing-key-file", files["pki/sa.key"],
		"authorization-mode", "Node,RBAC",
		"enable-admission-plugins", "NodeRestriction",
		"allow-privileged", "true",
		"profiling", "false",
	))
	if err != nil {
		return err
	}
	admin, err := n.kubeconfigFor(files, "admin", server)
	if err != nil {
		return err
	}
	n.Kubeconfig = admin
	if n.Config, err = clientcmd.BuildConfigFromFlags("", admin); err != nil {
		return fmt.Errorf("localnode: admin kubeconfig: %w", err)
	}
	adminHTTP, err := rest.HTTPClientFor(n.Config)
	if err != nil {
		return fmt.Errorf("localnode: admin client: %w", err)
	}
	if err := waitFor(ctx, "kube-apiserver", 200*time.Millisecond, httpOK(adminHTTP, server+"/readyz"), api); err != nil {
		return err
	}
	fmt.Fprintf(n.o.Progress, "localnode: kube-apiserver up at %s in %s\n", server, since(step))

	kcm, err := n.kubeconfigFor(files, "kube-controller-manager", server)
	if err != nil {
		return err
	}
	if _, err := n.start("kube-controller-manager", c.KubeControllerManager, flags(
		"kubeconfig", kcm, "authentication-kubeconfig", kcm, "authorization-kubeconfig", kcm,
		"service-account-private-key-file", files["pki/sa.key"], "root-ca-file", files["pki/ca.crt"],
		"use-service-account-credentials", "true",
		"leader-elect", "false", "secure-port", "0",
	)); err != nil {
		return err
	}
	sched, err := n.kubeconfigFor(files, "kube-scheduler", server)
	if err != nil {
		return err
	}
	if _, err := n.start("kube-scheduler", c.KubeScheduler, flags(
		"kubeconfig", sched, "authentication-kubeconfig", sched, "authorization-kubeconfig", sched,
		"leader-elect", "false", "secure-port", "0",
	)); err != nil {
		return err
	}
	return nil
}

func (n *Node) startNode(ctx context.Context, files configFiles) error {
	c := n.o.Components
	ctrDir := filepath.Join(BaseDir, "containerd")
	socket := filepath.Join(ctrDir, "containerd.sock")
	conf := containerdConfig(ctrDir, c.Runc, c.CNIBinDir, filepath.Join(BaseDir, "cni", "net.d"), n.o.PauseImage)
	confFiles, err := writePrivateFiles(ctrDir, map[string][]byte{"config.toml": conf})
	if err != nil {
		return err
	}
	step := time.Now()
	path := "PATH=" + c.ShimDir + ":" + filepath.Dir(c.Runc) + ":" + os.Getenv("PATH")
	containerd, err := n.start("containerd", c.Containerd, []string{"--config", confFiles["config.toml"], "--log-level", "warn"}, path)
	if err != nil {
		return err
	}
	ctrVersion := func(ctx context.Context) error {
		return exec.CommandContext(ctx, c.Ctr, "--address", socket, "version").Run()
	}
	if err := waitFor(ctx, "containerd", 100*time.Millisecond, ctrVersion, containerd); err != nil {
		return err
	}
	fmt.Fprintf(n.o.Progress, "localnode: containerd up in %s\n", since(step))
	for _, tarball := range n.o.Images {
		if err := n.ImportImage(ctx, tarball); err != nil {
			return err
		}
	}

	api := n.Config.Host
	kubeletKubeconfig, err := n.kubeconfigFor(files, "kubelet", api)
	if err != nil {
		return err
	}
	kubeletDir := filepath.Join(BaseDir, "kubelet")
	kcFiles, err := writePrivateFiles(kubeletDir, map[string][]byte{
		"config.yaml": kubeletConfig(socket, files["pki/ca.crt"], filepath.Join(kubeletDir, "pki"), filepath.Join(BaseDir, "pod-logs")),
	})
	if err != nil {
		return err
	}
	step = time.Now()
	kubelet, err := n.start("kubelet", c.Kubelet, flags(
		"config", kcFiles["config.yaml"], "kubeconfig", kubeletKubeconfig,
		"root-dir", kubeletDir, "cert-dir", filepath.Join(kubeletDir, "pki"),
		"hostname-override", NodeName, "node-ip", HostIP,
		"v", "1",
	), path)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(n.Config)
	if err != nil {
		return fmt.Errorf("localnode: %w", err)
	}
	if err := waitFor(ctx, "node "+NodeName+" Ready", 250*time.Millisecond, nodeReady(client), kubelet, containerd); err != nil {
		return err
	}
	fmt.Fprintf(n.o.Progress, "localnode: kubelet registered %s and it is Ready in %s\n", NodeName, since(step))

	proxyKubeconfig, err := n.kubeconfigFor(files, "kube-proxy", api)
	if err != nil {
		return err
	}
	pcFiles, err := writePrivateFiles(filepath.Join(BaseDir, "kube-proxy"), map[string][]byte{"config.yaml": kubeProxyConfig(proxyKubeconfig)})
	if err != nil {
		return err
	}
	step = time.Now()
	proxy, err := n.start("kube-proxy", c.KubeProxy, []string{"--config", pcFiles["config.yaml"]}, path)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "kube-proxy", 200*time.Millisecond, httpOK(http.DefaultClient, "http://127.0.0.1:10256/healthz"), proxy); err != nil {
		return err
	}
	fmt.Fprintf(n.o.Progress, "localnode: kube-proxy programs Services in iptables mode (up in %s)\n", since(step))
	return waitFor(ctx, "the default service account", 200*time.Millisecond, func(ctx context.Context) error {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// ImportImage imports a docker-archive tarball into the containerd namespace the kubelet uses.
func (n *Node) ImportImage(ctx context.Context, tarball string) error {
	step := time.Now()
	socket := filepath.Join(BaseDir, "containerd", "containerd.sock")
	out, err := exec.CommandContext(ctx, n.o.Components.Ctr, "--address", socket, "--namespace", "k8s.io",
		"images", "import", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("localnode: importing %s into containerd: %w: %s", tarball, err, strings.TrimSpace(string(out)))
	}
	fmt.Fprintf(n.o.Progress, "localnode: imported %s in %s\n", filepath.Base(tarball), since(step))
	return nil
}

// Stop stops every component, removes the pods' containers, mounts, network namespaces,
// iptables rules and the bridge, and BaseDir unless the environment variable BATON_KEEP_NODE is
// set (then the logs stay for a look).
func (n *Node) Stop() {
	for i := len(n.procs) - 1; i >= 0; i-- {
		n.procs[i].stop(10 * time.Second)
	}
	n.procs = nil
	if os.Getenv("BATON_KEEP_NODE") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := cleanUp(ctx, n.o.Components.KubeProxy); err != nil {
			fmt.Fprintf(n.o.Progress, "localnode: cleaning up: %v\n", err)
		}
		cancel()
	}
	if n.unlock != nil {
		n.unlock()
		n.unlock = nil
	}
}

// KillContainer sends SIGKILL to a container's process, as a crash would: containerID is a
// container status's ContainerID ("containerd://<id>"). The kubelet sees the container exit and
// applies the pod's restart policy.
func (n *Node) KillContainer(ctx context.Context, containerID string) error {
	id, ok := strings.CutPrefix(containerID, "containerd://")
	if !ok || id == "" {
		return fmt.Errorf("localnode: container ID %q is not containerd://<id>", containerID)
	}
	socket := filepath.Join(BaseDir, "containerd", "containerd.sock")
	out, err := exec.CommandContext(ctx, n.o.Components.Ctr, "--address", socket, "--namespace", "k8s.io",
		"tasks", "kill", "--signal", "SIGKILL", id).CombinedOutput()
	if err != nil {
		return fmt.Errorf("localnode: killing container %s: %w: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// EmptyDir returns the host directory of a pod's emptyDir volume, where the kubelet keeps it.
func (n *Node) EmptyDir(podUID, volume string) string {
	return filepath.Join(BaseDir, "kubelet", "pods", podUID, "volumes", "kubernetes.io~empty-dir", volume)
}

func (n *Node) start(name, bin string, args []string, env ...string) (*process, error) {
	p, err := startProcess(BaseDir, name, bin, args, env...)
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
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

func nodeReady(client kubernetes.Interface) func(context.Context) error {
	return func(ctx context.Context) error {
		node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
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
