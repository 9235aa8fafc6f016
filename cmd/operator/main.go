// Command operator runs baton's operator: the sidecar-injecting webhook, DistributedLock status and
// sidecar permissions. Run it with -h for its flags; the Helm chart in charts/baton sets them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/baton-dev/baton/internal/operator"
	"github.com/baton-dev/baton/internal/version"
)

func main() {
	if version.Asked(os.Args[1:]) {
		fmt.Println(version.Line("baton-operator"))
		return
	}
	opts, err := operator.ParseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		operator.Usage(os.Stdout)
		fmt.Println(version.Usage)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) },
		funcr.Options{LogTimestamp: true, Verbosity: opts.LogVerbosity}).WithName("baton-operator")
	// controller-runtime and client-go log through these package-level loggers (the certificate
	// rotator and leader election among them); point them at ours once, here in main.
	ctrl.SetLogger(log)
	klog.SetLogger(log)

	cfg, err := operator.RESTConfig(opts)
	if err != nil {
		log.Error(err, "no Kubernetes configuration")
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := operator.Run(ctx, opts, cfg, log); err != nil {
		log.Error(err, "operator failed")
		stop()
		os.Exit(1)
	}
}
