// Command kube builds and caches the Kubernetes control plane and the client
// tools used by the tests (kube-apiserver, kube-controller-manager, etcd,
// kubectl and helm, built from Go modules; see internal/localkube).
//
//	go run ./hack/kube install   # build if needed, print the bin dir
//	go run ./hack/kube path      # print the bin dir if built, exit 1 otherwise
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

	"github.com/baton-dev/baton/internal/localkube"
)

const usage = `usage: go run ./hack/kube <install|path> [-timeout 45m]

  install  build kube-apiserver, kube-controller-manager and kubectl %[1]s, etcd %[2]s
           and helm %[3]s from Go modules into the cache if they are not there
           yet (the first run takes about 10 minutes on 2 cores), then print
           the bin directory (it holds kubectl too; helm's path goes to stderr)
  path     print the bin directory if the binaries are built; exit 1 otherwise

The bin directory can be used as KUBEBUILDER_ASSETS for controller-runtime's envtest.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	printUsage := func() {
		fmt.Fprintf(stderr, usage, localkube.KubernetesVersion, localkube.EtcdVersion, localkube.HelmVersion)
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
		if err != nil {
			fmt.Fprintf(stderr, "kube: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "kube: kube-apiserver, kube-controller-manager, etcd and kubectl in %s, helm %s at %s; all ready after %s\n",
			binDir, localkube.HelmVersion, helm, time.Since(start).Round(time.Second))
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
	default:
		fmt.Fprintf(stderr, "kube: unknown command %q\n", cmd)
		printUsage()
		return 2
	}
}
