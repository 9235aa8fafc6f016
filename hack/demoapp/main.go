// Command demoapp is the app of baton's demos (see package demoapp), the entrypoint of the image
// baton.local/demoapp:
//
//	demoapp                 the app: GET / answers the pod name and fencing token; writes to
//	                        FENCED_URL while it holds the lock
//	demoapp serve-fenced    the fenced store (package fencedstore)
//	demoapp job             a Job's work: JOB_WRITES writes to FENCED_URL, WRITE_INTERVAL apart,
//	                        then exit 0 if the store accepted every one, 1 otherwise
//
// Both serve HTTP on LISTEN_ADDR (default :8080), log JSON lines to stderr and stop at SIGTERM.
// The app reads POD_NAME, BATON_SOCKET, LOCK_ID, FENCED_URL and WRITE_INTERVAL.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/sidecarclient"
)

const usage = `usage: demoapp [serve-fenced | job]
  demoapp               serve the demo app (env POD_NAME, BATON_SOCKET, LOCK_ID, FENCED_URL, WRITE_INTERVAL, LISTEN_ADDR)
  demoapp serve-fenced  serve the fenced store (env LISTEN_ADDR)
  demoapp job           write JOB_WRITES times to FENCED_URL and exit (env as the app, JOB_WRITES)
`

func main() {
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	if len(os.Args) > 2 || (mode != "" && mode != "serve-fenced" && mode != "job") {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	log := funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) }, funcr.Options{LogTimestamp: true})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch mode {
	case "serve-fenced":
		err = serveFenced(ctx, log.WithName("fenced"))
	case "job":
		err = runJob(ctx, log.WithName("demoapp"))
	default:
		err = serveApp(ctx, log.WithName("demoapp"))
	}
	if err != nil {
		log.Error(err, "demoapp failed")
		stop()
		os.Exit(1)
	}
}

func serveApp(ctx context.Context, log logr.Logger) error {
	cfg, err := demoapp.ConfigFromEnv(os.Getenv, os.Hostname)
	if err != nil {
		return err
	}
	app, err := demoapp.New(cfg, sidecarclient.New(cfg.Socket), log)
	if err != nil {
		return err
	}
	log.Info("starting", "pod", cfg.PodName, "listen", cfg.ListenAddr, "socket", cfg.Socket, "lockId", cfg.LockID, "fencedURL", cfg.FencedURL)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runDone, contendDone := make(chan error, 1), make(chan error, 1)
	go func() { runDone <- app.Run(ctx) }()
	go func() { contendDone <- app.Contend(ctx) }()
	err = serve(ctx, cfg.ListenAddr, app.Handler(), log)
	cancel() // the server stopped: so do the write and contend loops
	return errors.Join(err, <-runDone, <-contendDone)
}

func runJob(ctx context.Context, log logr.Logger) error {
	cfg, err := demoapp.ConfigFromEnv(os.Getenv, os.Hostname)
	if err != nil {
		return err
	}
	writes := demoapp.DefaultJobWrites
	if s := os.Getenv(demoapp.EnvJobWrites); s != "" {
		if writes, err = strconv.Atoi(s); err != nil || writes < 1 {
			return fmt.Errorf("%w: %s=%q: want a positive number of writes", demoapp.ErrInvalidConfig, demoapp.EnvJobWrites, s)
		}
	}
	app, err := demoapp.New(cfg, sidecarclient.New(cfg.Socket), log)
	if err != nil {
		return err
	}
	log.Info("job starting", "pod", cfg.PodName, "writes", writes, "fencedURL", cfg.FencedURL)
	if err := app.RunJob(ctx, writes); err != nil {
		return err
	}
	log.Info("job done", "writes", app.Writes())
	return nil
}

func serveFenced(ctx context.Context, log logr.Logger) error {
	addr := os.Getenv(demoapp.EnvListenAddr)
	if addr == "" {
		addr = demoapp.DefaultListenAddr
	}
	store, err := fencedstore.New(fencedstore.WithLogger(log.WithName("fenced")))
	if err != nil {
		return err
	}
	return serve(ctx, addr, store, log)
}

// serve serves h on addr until ctx is done, then shuts down within 5s.
func serve(ctx context.Context, addr string, h http.Handler, log logr.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s (%s): %w", addr, demoapp.EnvListenAddr, err)
	}
	log.Info("serving", "addr", ln.Addr().String())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
