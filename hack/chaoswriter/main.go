// Command chaoswriter is the program the chaos runs start under `baton run` (the run workload of
// package chaos): while baton holds the lock for it, it writes to a fenced resource with the
// token baton gave it, every 20 ms, for a while, and exits 0. SIGTERM (baton's, when the lock is
// lost) ends it at once, unless CHAOS_IGNORE_TERM is set: then only SIGKILL does.
//
// Environment: BATON_TOKEN (from baton run), CHAOS_FENCED_URL (the resource's URL),
// CHAOS_WRITER (its name in the resource's log), CHAOS_HOLD (how long to write, e.g. 1.5s),
// CHAOS_IGNORE_TERM.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/testing/fencedstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaoswriter:", err)
		os.Exit(1)
	}
}

func run() error {
	token, err := strconv.ParseInt(os.Getenv("BATON_TOKEN"), 10, 64)
	if err != nil {
		return fmt.Errorf("BATON_TOKEN: %w", err)
	}
	hold, err := time.ParseDuration(os.Getenv("CHAOS_HOLD"))
	if err != nil {
		return fmt.Errorf("CHAOS_HOLD: %w", err)
	}
	url, writer := os.Getenv("CHAOS_FENCED_URL"), os.Getenv("CHAOS_WRITER")
	if url == "" || writer == "" {
		return fmt.Errorf("CHAOS_FENCED_URL (%q) and CHAOS_WRITER (%q) must be set", url, writer)
	}
	ctx := context.Background()
	if os.Getenv("CHAOS_IGNORE_TERM") == "" {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
	} else {
		signal.Ignore(syscall.SIGTERM) // a stubborn CMD: baton must kill it by the lease's deadline
	}
	ctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	client := fencedstore.NewClient(url, &http.Client{Timeout: time.Second})
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		// A rejected write (a newer token wrote meanwhile) is what fencing is for: go on.
		_, _ = client.Write(ctx, fencedstore.Write{Token: token, Writer: writer})
	}
}
