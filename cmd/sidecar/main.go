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

	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/sidecar"
)

// memoryLimit is the default soft memory limit: it keeps the sidecar's resident size small (BRIEF
// §7: RSS ≤ 30 MiB). GOMEMLIMIT overrides it.
const memoryLimit = 20 << 20

func main() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	opts, err := sidecar.ParseOptions(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		sidecar.Usage(os.Stdout)
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
