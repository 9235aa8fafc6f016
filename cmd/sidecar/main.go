// Command sidecar is baton's per-pod lock holder (see package sidecar). Every setting is a flag or
// an environment variable; run it with -h to list them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/version"
	"github.com/baton-dev/baton/sidecar"
)

// memoryLimit is the default soft memory limit: it keeps the sidecar's resident size small (docs/design.md,
// Targets: RSS ≤ 30 MiB). GOMEMLIMIT overrides it.
const memoryLimit = 20 << 20

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pre-stop" {
		os.Exit(preStop(os.Args[2:]))
	}
	if version.Asked(os.Args[1:]) {
		fmt.Println(version.Line("baton-sidecar"))
		return
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	opts, err := sidecar.ParseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		sidecar.Usage(os.Stdout)
		fmt.Println(version.Usage)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{LogTimestamp: true})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := sidecar.Run(ctx, opts, log.WithName("baton")); err != nil {
		log.Error(err, "sidecar failed")
		stop()
		os.Exit(1)
	}
}

// preStop is the preStop hook of a sidecar that runs as a regular container (clusters without
// native sidecars): Kubernetes signals every container at once, so the hook holds back the
// sidecar's SIGTERM for --wait while the application stops, and the lock is released after it.
func preStop(args []string) int {
	fs := flag.NewFlagSet("sidecar pre-stop", flag.ContinueOnError)
	wait := fs.Duration("wait", sidecarcontract.DefaultShutdownTimeout, "how long to hold back the sidecar's shutdown (at most 5m)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *wait < 0 || *wait > sidecarcontract.MaxShutdownTimeout {
		fmt.Fprintf(os.Stderr, "sidecar pre-stop: --wait=%v: want 0 to %v\n", *wait, sidecarcontract.MaxShutdownTimeout)
		return 2
	}
	time.Sleep(*wait)
	return 0
}
