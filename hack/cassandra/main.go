// Command cassandra installs and runs local Apache Cassandra clusters for
// demos and CI, without Docker (see internal/testing/localcassandra).
//
//	go run ./hack/cassandra install [-cluster single|trio]
//	go run ./hack/cassandra start   [-cluster single|trio]   # runs in the background, prints contact points
//	go run ./hack/cassandra status  [-cluster single|trio]
//	go run ./hack/cassandra stop    [-cluster single|trio]
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

	"github.com/baton-dev/baton/internal/testing/localcassandra"
)

const usage = `usage: go run ./hack/cassandra <install|start|stop|status> [-cluster single|trio] [-timeout 3m]

  install  fetch Cassandra %s and its jars from Maven Central into the cache (idempotent)
  start    start the cluster in the background, wait until it answers CQL, print contact points
           (does nothing if it is already running)
  status   show which nodes are running
  stop     stop the cluster's nodes and remove its state

clusters:
  single   1 node,  127.0.0.1,           CQL port 9042
  trio     3 nodes, 127.0.0.1-127.0.0.3, CQL port 9142
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	printUsage := func() { fmt.Fprintf(stderr, usage, localcassandra.DefaultVersion) }
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			printUsage()
			return 0
		}
		fmt.Fprintln(stderr, "cassandra: missing command")
		printUsage()
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("cassandra "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = printUsage
	clusterName := fs.String("cluster", "single", "cluster preset: single or trio")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long start waits for the nodes")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cassandra: unexpected arguments %q\n", fs.Args())
		printUsage()
		return 2
	}
	cfg, err := localcassandra.Preset(*clusterName)
	if err != nil {
		fmt.Fprintf(stderr, "cassandra: %v\n", err)
		printUsage()
		return 2
	}
	cfg.Progress = stderr
	cfg.StartTimeout = *timeout
	cfg.DieWithParent = false

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "install":
		lib, err := localcassandra.Install(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "cassandra: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "Cassandra jars in %s\n", lib)
	case "start":
		if sts, err := localcassandra.Status(ctx, cfg); err == nil && allUp(sts) {
			fmt.Fprintf(stderr, "cassandra %s: already running\n", cfg.Name)
			printHosts(stdout, sts)
			return 0
		}
		c, err := localcassandra.Start(ctx, cfg)
		if err != nil {
			// Start has already killed the nodes it started; their logs stay
			// in the run directory until the next start or stop.
			fmt.Fprintf(stderr, "cassandra: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, strings.Join(c.Hosts(), ","))
	case "status":
		sts, err := localcassandra.Status(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "cassandra: %v\n", err)
			return 1
		}
		up := 0
		for _, st := range sts {
			state := "not running"
			switch {
			case st.Running && st.CQL:
				state, up = fmt.Sprintf("running (pid %d), CQL up", st.PID), up+1
			case st.Running:
				state = fmt.Sprintf("running (pid %d), CQL not answering yet", st.PID)
			case st.CQL:
				state = "CQL port answers, but not a node started by this tool"
			}
			fmt.Fprintf(stdout, "cassandra %s: node %d/%d %s %s (log %s)\n", cfg.Name, st.Node, len(sts), st.Host, state, st.Log)
		}
		if up != len(sts) {
			return 3
		}
	case "stop":
		if err := localcassandra.Teardown(ctx, cfg); err != nil {
			fmt.Fprintf(stderr, "cassandra: %v\n", err)
			return 1
		}
	default:
		fmt.Fprintf(stderr, "cassandra: unknown command %q\n", cmd)
		printUsage()
		return 2
	}
	return 0
}

func allUp(sts []localcassandra.NodeStatus) bool {
	for _, st := range sts {
		if !st.Running || !st.CQL {
			return false
		}
	}
	return len(sts) > 0
}

func printHosts(w io.Writer, sts []localcassandra.NodeStatus) {
	hosts := make([]string, len(sts))
	for i, st := range sts {
		hosts[i] = st.Host
	}
	fmt.Fprintln(w, strings.Join(hosts, ","))
}
