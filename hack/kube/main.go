// Command kube builds and caches the Kubernetes control plane and the client
// tools used by the tests (kube-apiserver, kube-controller-manager, etcd,
// kubectl and helm, built from Go modules; see internal/testing/localkube), and what a
// node runs (kubelet, kube-proxy, containerd and the CNI plugins, built from
// Go modules, and runc, iptables and conntrack from Debian packages; see
// internal/testing/localnode).
//
//	go run ./hack/kube install     # build/install if needed, print the bin dir
//	go run ./hack/kube path        # print the bin dir if built, exit 1 otherwise
//	go run ./hack/kube node-path   # print the node's binaries, exit 1 if any is missing
//
// The bin dir works as envtest's KUBEBUILDER_ASSETS:
//
//	export KUBEBUILDER_ASSETS=$(go run ./hack/kube path)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/localnode"
)

const usage = `usage: go run ./hack/kube <install|path|node-path> [-timeout 45m]

  install    build kube-apiserver, kube-controller-manager and kubectl %[1]s, etcd %[2]s
             and helm %[3]s from Go modules into the cache if they are not there
             yet (the first run takes about 10 minutes on 2 cores); then a
             node's kube-scheduler, kubelet and kube-proxy %[1]s, containerd
             %[4]s and the CNI plugins %[5]s (about 4 minutes more), and
             runc, iptables and conntrack with apt-get if they are missing
             and we are root (without root they are reported missing, which
             fails only under CI=true); then print the bin directory (it
             holds kubectl too; the other paths go to stderr)
  path       print the bin directory if the binaries are built; exit 1 otherwise
  node-path  print name=path for each binary a node runs if all are there;
             exit 1 otherwise

The bin directory can be used as KUBEBUILDER_ASSETS for controller-runtime's envtest.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	printUsage := func() {
		fmt.Fprintf(stderr, usage, localkube.KubernetesVersion, localkube.EtcdVersion, localkube.HelmVersion, localnode.ContainerdVersion, localnode.CNIPluginsVersion)
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			printUsage()
			return 0
		}
		fmt.Fprintln(stderr, "kube: missing command")
		printUsage()
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("kube "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = printUsage
	timeout := fs.Duration("timeout", 45*time.Minute, "how long install may take")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kube: unexpected arguments %q\n", fs.Args())
		printUsage()
		return 2
	}
	cfg := localkube.Config{Progress: stderr}

	switch cmd {
	case "install":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		start := time.Now()
		binDir, err := localkube.Install(ctx, cfg)
		if err == nil {
			_, err = localkube.Kubectl(ctx, cfg)
		}
		var helm string
		if err == nil {
			helm, err = localkube.Helm(ctx, cfg)
		}
		var node localnode.Binaries
		if err == nil {
			node, err = localnode.Install(ctx, localnode.Config{Progress: stderr})
			if errors.Is(err, localnode.ErrMissingPackages) && os.Getenv("CI") != "true" {
				// Only a node needs them, and its tests skip outside CI.
				fmt.Fprintf(stderr, "kube: warning: a local node cannot run here: %v\n", err)
				err = nil
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "kube: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "kube: kube-apiserver, kube-controller-manager, etcd, kubectl, kube-scheduler, kubelet and kube-proxy in %s, helm %s at %s, containerd %s in %s, CNI plugins %s in %s; all ready after %s\n",
			binDir, localkube.HelmVersion, helm, localnode.ContainerdVersion, node.ShimDir, localnode.CNIPluginsVersion, node.CNIBinDir, time.Since(start).Round(time.Second))
		fmt.Fprintln(stdout, binDir)
		return 0
	case "path":
		binDir, ok, err := localkube.Installed(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "kube: %v\n", err)
			return 1
		}
		if !ok {
			fmt.Fprintf(stderr, "kube: the Kubernetes %s control plane is not built yet in %s; run `go run ./hack/kube install`\n", localkube.KubernetesVersion, binDir)
			return 1
		}
		fmt.Fprintln(stdout, binDir)
		return 0
	case "node-path":
		bins, missing, err := localnode.Installed(localnode.Config{})
		if err != nil {
			fmt.Fprintf(stderr, "kube: %v\n", err)
			return 1
		}
		if len(missing) > 0 {
			fmt.Fprintf(stderr, "kube: the node's binaries are not all there; missing: %s; run `go run ./hack/kube install` (as root for the Debian packages)\n", strings.Join(missing, ", "))
			return 1
		}
		for _, kv := range [][2]string{
			{"kube-scheduler", bins.KubeScheduler}, {"kubelet", bins.Kubelet}, {"kube-proxy", bins.KubeProxy},
			{"containerd", bins.Containerd}, {"ctr", bins.Ctr}, {"shim-dir", bins.ShimDir},
			{"cni-bin-dir", bins.CNIBinDir},
			{"runc", bins.Runc}, {"iptables", bins.Iptables}, {"conntrack", bins.Conntrack},
		} {
			fmt.Fprintf(stdout, "%s=%s\n", kv[0], kv[1])
		}
		return 0
	default:
		fmt.Fprintf(stderr, "kube: unknown command %q\n", cmd)
		printUsage()
		return 2
	}
}
