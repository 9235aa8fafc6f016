// Command baton is the baton CLI: it shows the locks of the pod's sidecar, waits for them, and runs
// a command under a lock, through the sidecar or directly in Cassandra (see package cli).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-dev/baton/internal/cli"
)

func main() {
	// SIGINT and SIGTERM go to the CLI: it forwards them to the command run supervises, and
	// otherwise stops with exit code 128+signal.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	code := cli.Main(context.Background(), sigs, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	signal.Stop(sigs)
	os.Exit(code)
}
