package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/sidecarapi"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/baton-dev/baton/lock/hintudp"
)

// sessionCloseTimeout bounds closing the Cassandra session at exit, after the locks were released.
const sessionCloseTimeout = time.Second

// Run runs the sidecar until ctx ends (SIGTERM), then shuts down within opts.ShutdownTimeout:
// it stops claiming its locks, releases them and closes the API. Connecting to Cassandra is
// retried with progress logs until ctx ends. Its phases: check the options and the Kubernetes
// client, connect to the lock store, set up the lock's options, build the holder, serve the API
// and the metrics, hold, and shut down.
func Run(ctx context.Context, opts Options, log logr.Logger) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	kube, err := kubeClientFor(opts)
	if err != nil {
		return err
	}
	store, closeSession, err := connectStore(ctx, opts, log)
	if errors.Is(err, errStoppedBeforeStore) {
		log.Info("stopped before Cassandra was reachable: no lock was held")
		return nil
	}
	if err != nil {
		return err
	}
	defer closeSession()
	metrics := newMetricSet()
	lockOpts, closeLockOptions, err := lockOptions(ctx, opts, metrics, log)
	if err != nil {
		return err
	}
	defer closeLockOptions()
	holder, err := newInstrumentedHolder(opts, store, log.WithName("holder"), metrics, lockOpts...)
	if err != nil {
		return err
	}
	srv, served, err := serve(ctx, opts, holder, metrics, log)
	if err != nil {
		return err
	}
	runCtx, stopHolding := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHolding()
	gate, stopGate := hold(runCtx, kube, opts, holder, log)

	select {
	case <-ctx.Done():
		log.Info("shutting down: releasing locks", "timeout", opts.ShutdownTimeout.String())
	case err := <-served:
		log.Error(err, "lock API stopped; shutting down")
	}
	return shutdown(ctx, opts, gate, stopGate, holder, stopHolding, srv, log)
}

// errStoppedBeforeStore is connectStore's error when ctx ended before Cassandra was reachable.
var errStoppedBeforeStore = errors.New("sidecar: stopped before Cassandra was reachable")

// kubeClientFor returns the Kubernetes client the sidecar needs, or nil when it needs none (traffic
// policy None and no pod watch). It runs before any other work: outside a cluster the default
// traffic policy cannot work, and that must not surface only after Cassandra is reached. It does
// not contact the API server.
func kubeClientFor(opts Options) (kubernetes.Interface, error) {
	if opts.TrafficPolicy == batonv1.TrafficNone && !opts.WatchesPod() {
		return nil, nil
	}
	return kubeClient(opts.Kubeconfig)
}

// connectStore connects to Cassandra, retrying until ctx ends (then errStoppedBeforeStore), and
// opens the lock store. closeSession closes the session, waiting at most sessionCloseTimeout: by
// the time it runs every lock is given back (or expires by itself), so closing the session only
// tidies up, and a hung node's connection may not hold the pod's exit for long.
func connectStore(ctx context.Context, opts Options, log logr.Logger) (store *cassandrastore.Store, closeSession func(), err error) {
	cc, err := opts.Cassandra.ClusterConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar: %w", err)
	}
	session, err := connect(ctx, cc, log)
	if err != nil && ctx.Err() != nil {
		return nil, nil, errStoppedBeforeStore
	}
	if err != nil {
		return nil, nil, err
	}
	closeSession = func() {
		if !cassandrastore.CloseSession(session, sessionCloseTimeout) {
			log.Info("closing the Cassandra session is taking long; exiting without waiting", "waited", sessionCloseTimeout.String())
		}
	}
	store, err = openStore(ctx, session, log, opts.Cassandra.StoreOptions()...)
	if err != nil {
		closeSession()
		return nil, nil, err
	}
	if opts.Cassandra.ClusterName == "" {
		// The pod was admitted before the operator recorded the lock's cluster (status.cassandraClusterName):
		// in practice only in the first moments after the DistributedLock was created.
		log.Info("connected to the lock store without a cluster check: the DistributedLock had no recorded Cassandra cluster when this pod was admitted",
			"cluster", store.ClusterName())
	} else {
		log.Info("connected to the lock store", "cluster", store.ClusterName())
	}
	return store, closeSession, nil
}

// lockOptions returns the lock options of opts: hand-off hints (a UDP socket that outlives ctx,
// so that the releases at shutdown still tell the next waiters) and, in Blocking mode, zero-wait
// restart. closeAll releases the restart proof and closes the hint socket; call it once the locks
// are released.
//
// Zero-wait restart: a restarted sidecar of this pod takes its predecessor's grants over at once,
// proven by the secret in the pod's emptyDir (see openRestartProof). The grant was the sidecar's
// own. Not in Try mode: there the grant belongs to an app process that may still be acting on it,
// which a restarted sidecar cannot know, so it waits the grant out. Without the proof (it cannot
// be written) the sidecar starts anyway, without zero-wait restart.
func lockOptions(ctx context.Context, opts Options, metrics *metricSet, log logr.Logger) (lockOpts []lock.Option, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if opts.HintPort > 0 {
		addr, _ := opts.HintAddr() // validated by Run
		hintCtx, stopHints := context.WithCancel(context.WithoutCancel(ctx))
		closers = append(closers, stopHints)
		hinter, err := hintudp.New(hintCtx, hintudp.Config{Bind: addr.String(), AllowLoopback: opts.HintAllowLoopback,
			Log: log.WithName("hints")})
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("sidecar: listening for hand-off hints (%s): %w", sidecarcontract.HintPort.Env(), err)
		}
		lockOpts = append(lockOpts, lock.WithHinter(hinter))
		metrics.watchHints(hinter.Stats)
		log.Info("listening for hand-off hints", "address", "udp://"+hinter.Addr())
	}
	if opts.Mode == batonv1.ModeBlocking {
		secret, release, err := openRestartProof(opts.SocketPath)
		if err != nil {
			log.Info("zero-wait restart is off: a grant of an earlier sidecar of this pod is waited out like anybody's", "reason", err.Error())
		} else {
			closers = append(closers, release)
			lockOpts = append(lockOpts, lock.WithZeroWaitRestart(secret))
		}
	}
	return lockOpts, closeAll, nil
}

// serve serves the metrics on opts.MetricsAddr and the lock API of holder on the socket (and the
// loopback TCP address when configured). served receives the error of the first listener whose
// server stops; the metrics server stops with ctx.
func serve(ctx context.Context, opts Options, holder *Holder, metrics *metricSet, log logr.Logger) (srv *sidecarapi.Server, served <-chan error, err error) {
	metricsLn, err := serveMetrics(ctx, opts.MetricsAddr, metrics)
	if err != nil {
		return nil, nil, err
	}
	log.Info("serving metrics", "address", "http://"+metricsLn.Addr().String()+"/metrics")
	handler, err := sidecarapi.NewHandler(holder, sidecarapi.WithLogger(log.WithName("api")))
	if err != nil {
		return nil, nil, err
	}
	srv, err = sidecarapi.NewServer(handler, sidecarapi.WithServerLogger(log.WithName("api")))
	if err != nil {
		return nil, nil, err
	}
	listeners, err := listen(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	errs := make(chan error, len(listeners))
	for _, ln := range listeners {
		go func() { errs <- srv.Serve(ln) }()
		log.Info("serving the lock API", "address", ln.Addr().String())
	}
	return srv, errs, nil
}

// hold starts holding the locks until runCtx ends: the gate that writes the pod's readiness
// condition or role label (when kube is not nil), the pod watch (when opts asks for it) and the
// holder. stopGate stops the gate and waits for it; gate is nil without kube.
func hold(runCtx context.Context, kube kubernetes.Interface, opts Options, holder *Holder, log logr.Logger) (gate *Gate, stopGate func()) {
	stopGate = func() {}
	if kube != nil {
		gate = NewGate(kube, opts, holder, log.WithName("gate"))
		gateDone := make(chan struct{})
		gateCtx, cancelGate := context.WithCancel(runCtx)
		go func() { gate.Run(gateCtx); close(gateDone) }()
		stopGate = func() { cancelGate(); <-gateDone }
	}
	if opts.WatchesPod() {
		watch := NewPodWatch(kube, opts, holder, log.WithName("pod"))
		go watch.Run(runCtx)
		log.Info("the locks follow the pod's state", "yieldWhenUnready", opts.YieldWhenUnready.String(),
			"handoff", opts.Handoff, "readEvery", podWatchPeriod(opts).String())
	}
	holder.Start(runCtx)
	log.Info("sidecar started", "pod", opts.Owner(), "locks", opts.LockIDs, "mode", opts.Mode, "lease", opts.Lease.String())
	return gate, stopGate
}

// shutdown stops the sidecar within opts.ShutdownTimeout: it stops the gate, takes the pod out of
// traffic (best effort: at most 2 s, the lock does not wait for Kubernetes), releases the locks,
// stops holding and closes the API. A lock it could not release expires after one lease.
func shutdown(ctx context.Context, opts Options, gate *Gate, stopGate func(), holder *Holder, stopHolding func(),
	srv *sidecarapi.Server, log logr.Logger) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	stopGate()
	if gate != nil {
		gctx, gcancel := context.WithTimeout(sctx, 2*time.Second)
		if err := gate.Apply(gctx, GateState{Reason: "ShuttingDown", Message: "the sidecar is releasing its locks"}); err != nil {
			log.Info("could not withdraw the pod from traffic before releasing", "err", err.Error())
		}
		gcancel()
	}
	releaseErr := holder.Shutdown(sctx)
	stopHolding()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if releaseErr != nil {
		return fmt.Errorf("sidecar: releasing locks at shutdown (they expire after one lease): %w", releaseErr)
	}
	log.Info("sidecar stopped")
	return nil
}

// connect opens a Cassandra session, retrying with backoff and a log line per attempt, except
// when Cassandra refuses the login or its certificate does not verify
// (cassandrastore.IsPermanentConnectError): that ends the sidecar at once, with what to change.
func connect(ctx context.Context, cc *gocql.ClusterConfig, log logr.Logger) (*gocql.Session, error) {
	session, err := retry(ctx, log, fmt.Sprintf("Cassandra at %v not reachable yet, retrying", cc.Hosts),
		func() (*gocql.Session, error) { return cassandrastore.CreateSession(cc) },
		func(err error) bool { return !cassandrastore.IsPermanentConnectError(err) })
	if cassandrastore.IsPermanentConnectError(err) {
		return nil, fmt.Errorf("sidecar: refusing to start: connecting to Cassandra at %v: %w", cc.Hosts, err)
	}
	if err != nil {
		return nil, fmt.Errorf("sidecar: connecting to Cassandra at %v: %w", cc.Hosts, err)
	}
	return session, nil
}

// openStore opens the lock store, waiting with backoff while the keyspace lacks baton's schema:
// the operator creates it when it first reads the DistributedLock, which may be moments after the
// first pod starts. Other errors end the sidecar at once, so that the pod's restarts and the
// container's last words say what is wrong: bad options, a newer schema, a Cassandra version
// unsafe for a lock (cassandrastore.ErrUnsafeServer), or another cluster than the one the lock
// lives on (cassandrastore.ErrClusterMismatch).
func openStore(ctx context.Context, session *gocql.Session, log logr.Logger, opts ...cassandrastore.Option) (*cassandrastore.Store, error) {
	store, err := retry(ctx, log, "waiting for the lock schema (the baton operator creates it)",
		func() (*cassandrastore.Store, error) { return cassandrastore.New(ctx, session, opts...) },
		func(err error) bool { return errors.Is(err, cassandrastore.ErrSchemaMissing) })
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("sidecar: %w", err)
	case errors.Is(err, cassandrastore.ErrClusterMismatch):
		return nil, fmt.Errorf("sidecar: refusing to start: the contact points do not reach the cluster %s names: %w", sidecarcontract.ClusterName, err)
	case errors.Is(err, cassandrastore.ErrUnsafeServer):
		return nil, fmt.Errorf("sidecar: refusing to start: %w", err)
	}
	return store, err
}

// retry calls f until it succeeds or fails with an error that retryable refuses, waiting 250ms
// doubling to 5s between attempts and logging msg at each failure. When ctx ends first, the error
// wraps ctx's error and the last failure.
func retry[T any](ctx context.Context, log logr.Logger, msg string, f func() (T, error), retryable func(error) bool) (T, error) {
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := f()
		if err == nil || !retryable(err) {
			return v, err
		}
		log.Info(msg, "attempt", attempt, "err", err.Error())
		if cerr := ctxtime.Sleep(ctx, backoff); cerr != nil {
			var zero T
			return zero, fmt.Errorf("%w (last error: %w)", cerr, err)
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listen opens the unix socket and, when configured, the loopback TCP address.
func listen(ctx context.Context, opts Options) ([]net.Listener, error) {
	unix, err := sidecarapi.ListenUnix(ctx, opts.SocketPath)
	if err != nil {
		return nil, fmt.Errorf("sidecar: %s: %w", sidecarcontract.Socket, err)
	}
	lns := []net.Listener{unix}
	if opts.ListenTCP != "" {
		host, _, err := net.SplitHostPort(opts.ListenTCP)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			unix.Close()
			return nil, fmt.Errorf("sidecar: %s is %q: give a loopback address such as 127.0.0.1:7946", sidecarcontract.ListenTCP, opts.ListenTCP)
		}
		tcp, err := net.Listen("tcp", opts.ListenTCP)
		if err != nil {
			unix.Close()
			return nil, fmt.Errorf("sidecar: %s: %w", sidecarcontract.ListenTCP, err)
		}
		lns = append(lns, tcp)
	}
	return lns, nil
}
