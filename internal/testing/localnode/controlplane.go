package localnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// controlPlane is the cluster's half of a running cluster: its CA and etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler. Nodes join it with certificates its CA signs.
type controlPlane struct {
	// dir holds the control plane's files: pki/, kubeconfig/, etcd/ and logs/.
	dir      string
	c        Components
	progress io.Writer

	ca    *authority
	files configFiles // pki/ca.crt, pki/apiserver.crt, ... by name, absolute paths
	// server is the API server's URL, on HostIP; config and kubeconfig are the admin's.
	server     string
	config     *rest.Config
	kubeconfig string
	procs      []*process // in start order
}

// configFiles are the paths of files written under a directory, by their names relative to it.
type configFiles map[string]string

// start writes the CA and the control plane's certificates and starts etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, waiting for etcd and the API server to be healthy.
// The processes it started are in cp.procs even when it fails, for stop.
func (cp *controlPlane) start(ctx context.Context) error {
	if err := cp.writeConfig(); err != nil {
		return err
	}
	etcdURL, err := cp.startEtcd(ctx)
	if err != nil {
		return err
	}
	if err := cp.startAPIServer(ctx, etcdURL); err != nil {
		return err
	}
	return cp.startControllers()
}

// writeConfig makes the cluster's CA and signs with it what the control plane needs: the API
// server's serving certificate, the service account key pair and one client certificate for the
// admin, each controller and the API server's calls to kubelets.
func (cp *controlPlane) writeConfig() error {
	ca, err := newAuthority()
	if err != nil {
		return err
	}
	server, err := ca.serving("kube-apiserver",
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP(HostIP), net.ParseIP(KubernetesServiceIP), net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return err
	}
	saPrivate, saPublic, err := serviceAccountKey()
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"pki/ca.crt": ca.PEM, "pki/apiserver.crt": server.Cert, "pki/apiserver.key": server.Key,
		"pki/sa.key": saPrivate, "pki/sa.pub": saPublic,
	}
	// One identity per component, with the groups the API server's bootstrap RBAC expects.
	for name, id := range map[string][]string{
		"admin":                   {"baton-node-admin", "system:masters"},
		"kube-controller-manager": {"system:kube-controller-manager"},
		"kube-scheduler":          {"system:kube-scheduler"},
		"apiserver-kubelet":       {"kube-apiserver-kubelet-client", "system:masters"},
	} {
		if err := signClient(ca, files, name, id[0], id[1:]...); err != nil {
			return err
		}
	}
	paths, err := writePrivateFiles(cp.dir, files)
	if err != nil {
		return err
	}
	cp.ca, cp.files = ca, paths
	return nil
}

// signClient adds pki/<name>.crt and pki/<name>.key to files: a client certificate for user in
// groups.
func signClient(ca *authority, files map[string][]byte, name, user string, groups ...string) error {
	pair, err := ca.client(user, groups...)
	if err != nil {
		return err
	}
	files["pki/"+name+".crt"], files["pki/"+name+".key"] = pair.Cert, pair.Key
	return nil
}

// writeKubeconfig writes dir/kubeconfig/<name>.yaml for the identity whose certificate and key are
// certFile and keyFile, trusting the cluster's CA, and returns its path.
func (cp *controlPlane) writeKubeconfig(dir, name, certFile, keyFile string) (string, error) {
	p := filepath.Join(dir, "kubeconfig", name+".yaml")
	data := kubeconfig(cp.server, cp.files["pki/ca.crt"], certFile, keyFile)
	if _, err := writePrivateFiles(filepath.Dir(p), map[string][]byte{filepath.Base(p): data}); err != nil {
		return "", err
	}
	return p, nil
}

// startEtcd starts etcd on two free loopback ports and returns its client URL once it is healthy.
func (cp *controlPlane) startEtcd(ctx context.Context) (string, error) {
	clientPort, err := freePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	peerPort, err := freePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	step := time.Now()
	etcd, err := cp.startProcess("etcd", cp.c.Etcd, flags(
		"data-dir", filepath.Join(cp.dir, "etcd"),
		"listen-client-urls", etcdURL, "advertise-client-urls", etcdURL,
		"listen-peer-urls", peerURL, "initial-advertise-peer-urls", peerURL,
		"initial-cluster", "default="+peerURL,
		"unsafe-no-fsync", "true", // a throwaway cluster: durability buys nothing and costs seconds
		"log-level", "warn",
	))
	if err != nil {
		return "", err
	}
	if err := waitFor(ctx, "etcd", 100*time.Millisecond, httpOK(http.DefaultClient, etcdURL+"/health"), etcd); err != nil {
		return "", err
	}
	fmt.Fprintf(cp.progress, "localnode: etcd up in %s\n", since(step))
	return etcdURL, nil
}

// startAPIServer starts kube-apiserver on HostIP, writes the admin's kubeconfig and waits until
// the API server is ready.
func (cp *controlPlane) startAPIServer(ctx context.Context, etcdURL string) error {
	apiPort, err := freePort(HostIP)
	if err != nil {
		return err
	}
	cp.server = "https://" + net.JoinHostPort(HostIP, strconv.Itoa(apiPort))
	files := cp.files
	step := time.Now()
	api, err := cp.startProcess("kube-apiserver", cp.c.KubeAPIServer, flags(
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
	admin, err := cp.writeKubeconfig(cp.dir, "admin", files["pki/admin.crt"], files["pki/admin.key"])
	if err != nil {
		return err
	}
	cp.kubeconfig = admin
	if cp.config, err = clientcmd.BuildConfigFromFlags("", admin); err != nil {
		return fmt.Errorf("localnode: admin kubeconfig: %w", err)
	}
	adminHTTP, err := rest.HTTPClientFor(cp.config)
	if err != nil {
		return fmt.Errorf("localnode: admin client: %w", err)
	}
	if err := waitFor(ctx, "kube-apiserver", 200*time.Millisecond, httpOK(adminHTTP, cp.server+"/readyz"), api); err != nil {
		return err
	}
	fmt.Fprintf(cp.progress, "localnode: kube-apiserver up at %s in %s\n", cp.server, since(step))
	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler without waiting for them:
// the node's Ready condition and the default service account show that they work.
func (cp *controlPlane) startControllers() error {
	files := cp.files
	kcm, err := cp.writeKubeconfig(cp.dir, "kube-controller-manager", files["pki/kube-controller-manager.crt"], files["pki/kube-controller-manager.key"])
	if err != nil {
		return err
	}
	if _, err := cp.startProcess("kube-controller-manager", cp.c.KubeControllerManager, flags(
		"kubeconfig", kcm, "authentication-kubeconfig", kcm, "authorization-kubeconfig", kcm,
		"service-account-private-key-file", files["pki/sa.key"], "root-ca-file", files["pki/ca.crt"],
		"use-service-account-credentials", "true",
		"leader-elect", "false", "secure-port", "0",
	)); err != nil {
		return err
	}
	sched, err := cp.writeKubeconfig(cp.dir, "kube-scheduler", files["pki/kube-scheduler.crt"], files["pki/kube-scheduler.key"])
	if err != nil {
		return err
	}
	_, err = cp.startProcess("kube-scheduler", cp.c.KubeScheduler, flags(
		"kubeconfig", sched, "authentication-kubeconfig", sched, "authorization-kubeconfig", sched,
		"leader-elect", "false", "secure-port", "0",
	))
	return err
}

func (cp *controlPlane) startProcess(name, bin string, args []string, env ...string) (*process, error) {
	p, err := startProcess(cp.dir, name, bin, args, env...)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// stop stops the control plane's processes, last started first. It does not remove files.
func (cp *controlPlane) stop() {
	stopAll(cp.procs)
	cp.procs = nil
}

// stopAll stops procs, last first, each with SIGTERM and up to 10 seconds before SIGKILL.
func stopAll(procs []*process) {
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(10 * time.Second)
	}
}
