package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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
// it stops claiming its locks, releases them and closes the API. It serves the API and writes the
// pod's condition from its start: until it reaches Cassandra every request is answered 503 with
// what it waits for, and the condition says the same (ReasonWaitingForStore). Connecting is
// retried with progress logs until ctx ends; a refused login, another cluster or an unsafe
// Cassandra version end it with an error, which the condition carries too (ReasonStoreRefused).
// Its phases: check the options and the Kubernetes client, serve the API and start the gate,
// connect to the lock store, set up the lock's options, build the holder, hand the API and the
// gate over to it, hold, and shut down.
func Run(ctx context.Context, opts Options, log logr.Logger) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	kube, err := kubeClientFor(opts)
	if err != nil {
		return err
	}
	start := newStartup("connecting to Cassandra at " + hostsText(opts))
	srv, served, err := serveAPI(ctx, opts, start, log)
	if err != nil {
		return err
	}
	runCtx, stopHolding := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHolding()
	gate, stopGate := startGate(runCtx, kube, opts, start, log)
	holder, closeAll, err := startHolder(ctx, opts, start, log)
	if err != nil {
		return stopStarting(ctx, err, gate, stopGate, srv, log)
	}
	defer closeAll()
	start.serve(holder)
	hold(runCtx, kube, opts, holder, log)

	select {
	case <-ctx.Done():
		log.Info("shutting down: releasing locks", "timeout", opts.ShutdownTimeout.String())
	case err := <-served:
		log.Error(err, "lock API stopped; shutting down")
	}
	return shutdown(ctx, opts, gate, stopGate, holder, stopHolding, srv, log)
}

// startHolder connects to the lock store (telling start what it waits for meanwhile), sets up the
// lock options and the metrics, and builds the holder. closeAll closes what it opened, in reverse;
// call it once the locks are released.
func startHolder(ctx context.Context, opts Options, start *startup, log logr.Logger) (holder *Holder, closeAll func(), err error) {
	var closers []func()
	closeOpened := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeOpened()
		}
	}()
	store, closeSession, err := connectStore(ctx, opts, start, log)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, closeSession)
	metrics := newMetricSet()
	lockOpts, closeLockOptions, err := lockOptions(ctx, opts, metrics, log)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, closeLockOptions)
	holder, err = newInstrumentedHolder(opts, store, log.WithName("holder"), metrics, lockOpts...)
	if err != nil {
		return nil, nil, err
	}
	metricsLn, err := serveMetrics(ctx, opts.MetricsAddr, metrics)
	if err != nil {
		return nil, nil, err
	}
	log.Info("serving metrics", "address", "http://"+metricsLn.Addr().String()+"/metrics")
	return holder, closeOpened, nil
}

// stopStarting ends a sidecar that stopped before its holder ran, because ctx ended
// (errStoppedBeforeStore: nil, nothing was held) or because of err. It stops the gate and, for
// err, writes err to the pod's condition (best effort, at most 2 s), then closes the API.
func stopStarting(ctx context.Context, err error, gate *Gate, stopGate func(), srv *sidecarapi.Server, log logr.Logger) error {
	stopGate()
	if errors.Is(err, errStoppedBeforeStore) {
		log.Info("stopped before Cassandra was reachable: no lock was held")
		err = nil
	} else if gate != nil {
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if aerr := gate.Apply(gctx, GateState{Reason: ReasonStoreRefused, Message: err.Error()}); aerr != nil {
			log.Info("could not report the failure to the pod", "err", aerr.Error())
		}
		cancel()
	}
	_ = srv.Close()
	return err
}

// hostsText names the contact points in messages: "cassandra.db:9042" or "10.0.0.1:9042,10.0.0.2:9042".
func hostsText(opts Options) string { return strings.Join(opts.Cassandra.ContactPoints, ",") }

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
func connectStore(ctx context.Context, opts Options, start *startup, log logr.Logger) (store *cassandrastore.Store, closeSession func(), err error) {
	cc, err := opts.Cassandra.ClusterConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("sidecar: %w", err)
	}
	hosts, redact := hostsText(opts), opts.Cassandra.Credentials.Redact
	session, err := connect(ctx, cc, hosts, redact, func(attempt int, err error) {
		start.waitFor(ReasonWaitingForStore, fmt.Sprintf("waiting for Cassandra at %s: %v (attempt %d; retrying)", hosts, redact(err), attempt))
	}, log)
	if err != nil && ctx.Err() != nil {
		return nil, nil, errStoppedBeforeStore
	}
	if err != nil {
		return nil, nil, err
	}
	start.waitFor(ReasonWaitingForStore, fmt.Sprintf("connected to Cassandra at %s; opening the lock store in keyspace %s", hosts, opts.Cassandra.Keyspace))
	closeSession = func() {
		if !cassandrastore.CloseSession(session, sessionCloseTimeout) {
			log.Info("closing the Cassandra session is taking long; exiting without waiting", "waited", sessionCloseTimeout.String())
		}
	}
	store, err = openStore(ctx, session, func(attempt int, err error) {
		start.waitFor(ReasonWaitingForStore, fmt.Sprintf("waiting for the lock schema in keyspace %s at %s (the baton operator creates it when it first reads the DistributedLock): %v (attempt %d; retrying)",
			opts.Cassandra.Keyspace, hosts, redact(err), attempt))
	}, redact, log, opts.Cassandra.StoreOptions()...)
	if err != nil {
		closeSession()
		if ctx.Err() != nil {
			return nil, nil, errStoppedBeforeStore
		}
		return nil, nil, redact(err)
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
		// Every sidecar listens and sends on the same hint port: echo only to probes from it.
		hinter, err := hintudp.New(hintCtx, hintudp.Config{Bind: addr.String(), AllowLoopback: opts.HintAllowLoopback,
			EchoPort: uint16(opts.HintPort), Log: log.WithName("hints")})
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

// serveAPI serves the lock API of svc on the socket (and the loopback TCP address when
// configured). served receives the error of the first listener whose server stops.
func serveAPI(ctx context.Context, opts Options, svc sidecarapi.Service, log logr.Logger) (srv *sidecarapi.Server, served <-chan error, err error) {
	handler, err := sidecarapi.NewHandler(svc, sidecarapi.WithLogger(log.WithName("api")))
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

// startGate starts the gate that writes the pod's readiness condition or role label from src
// (when kube is not nil) until runCtx ends. stopGate stops it and waits for it; gate is nil
// without kube.
func startGate(runCtx context.Context, kube kubernetes.Interface, opts Options, src gateSource, log logr.Logger) (gate *Gate, stopGate func()) {
	if kube == nil {
		return nil, func() {}
	}
	gate = newGate(kube, opts, src, log.WithName("gate"))
	gateDone := make(chan struct{})
	gateCtx, cancelGate := context.WithCancel(runCtx)
	go func() { gate.Run(gateCtx); close(gateDone) }()
	return gate, func() { cancelGate(); <-gateDone }
}

// hold starts holding the locks until runCtx ends: the pod watch (when opts asks for it) and the
// holder.
func hold(runCtx context.Context, kube kubernetes.Interface, opts Options, holder *Holder, log logr.Logger) {
	if opts.WatchesPod() {
		watch := NewPodWatch(kube, opts, holder, log.WithName("pod"))
		go watch.Run(runCtx)
		log.Info("the locks follow the pod's state", "yieldWhenUnready", opts.YieldWhenUnready.String(),
			"handoff", opts.Handoff, "readEvery", podWatchPeriod(opts).String())
	}
	holder.Start(runCtx)
	log.Info("sidecar started", "pod", opts.Owner(), "locks", opts.LockIDs, "mode", opts.Mode, "lease", opts.Lease.String())
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

// connect opens a Cassandra session, retrying with backoff and a log line per attempt, and
// telling failed (attempt, error) each time. A refused login or a server certificate that does not
// verify (cassandrastore.IsPermanentConnectError) ends it at once, a refused login with
// ErrLoginRefused: retrying cannot fix either, and the pod's restarts and the container's last
// words then say what is wrong.
func connect(ctx context.Context, cc *gocql.ClusterConfig, hosts string, redact func(error) error,
	failed func(attempt int, err error), log logr.Logger) (*gocql.Session, error) {
	session, err := retry(ctx, log, "Cassandra at "+hosts+" not reachable yet, retrying",
		func() (*gocql.Session, error) { return cassandrastore.CreateSession(cc) },
		func(err error) bool { return !cassandrastore.IsPermanentConnectError(err) }, failed, redact)
	if why, fix := loginRefused(err); why != "" && ctx.Err() == nil {
		return nil, fmt.Errorf("sidecar: refusing to start: Cassandra at %s %s (%w: %w); %s (the sidecar reads them from %s and %s)",
			hosts, why, ErrLoginRefused, redact(err), fix, sidecarcontract.UsernameFile, sidecarcontract.PasswordFile)
	}
	if cassandrastore.IsPermanentConnectError(err) && ctx.Err() == nil {
		return nil, fmt.Errorf("sidecar: refusing to start: connecting to Cassandra at %s: %w", hosts, redact(err))
	}
	if err != nil {
		return nil, fmt.Errorf("sidecar: connecting to Cassandra at %s: %w", hosts, redact(err))
	}
	return session, nil
}

// ErrLoginRefused is Run's error when Cassandra refuses the sidecar's login, or asks for one and
// the sidecar has no credentials.
var ErrLoginRefused = errors.New("Cassandra refused the login")

// loginRefused says how err is a refused login (why) and what to do (fix); "" when it is not
// one. The driver flattens the server's error into text (gocql: unable to create session: ...),
// so the text is all there is: the driver's own message when the server asks for a login and the
// client has no authenticator, and Cassandra's answer (error code 0x0100) to a wrong user name or
// password.
//
// What it does not guarantee: an authenticator other than Cassandra's PasswordAuthenticator may
// word its refusal otherwise; that is then retried like an unreachable node, its message shown.
func loginRefused(err error) (why, fix string) {
	if err == nil {
		return "", ""
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "authentication required (using"):
		return "requires a password login and the sidecar has no credentials",
			"name a Secret with the keyspace's user name and password in the DistributedLock's spec.cassandra.credentialsSecretRef, then recreate the pod"
	case strings.Contains(msg, "password are incorrect"), strings.Contains(msg, "Failed to login"),
		strings.Contains(msg, "Bad credentials"):
		return "refused the sidecar's user name or password",
			"fix them in the Secret named by the DistributedLock's spec.cassandra.credentialsSecretRef; the restarted container reads them again once the kubelet has updated the mounted Secret"
	}
	return "", ""
}

// openStore opens the lock store, waiting with backoff while the keyspace lacks baton's schema:
// the operator creates it when it first reads the DistributedLock, which may be moments after the
// first pod starts. Other errors end the sidecar at once, so that the pod's restarts and the
// container's last words say what is wrong: bad options, a newer schema, a Cassandra version
// unsafe for a lock (cassandrastore.ErrUnsafeServer), or another cluster than the one the lock
// lives on (cassandrastore.ErrClusterMismatch).
func openStore(ctx context.Context, session *gocql.Session, failed func(attempt int, err error), redact func(error) error, log logr.Logger,
	opts ...cassandrastore.Option) (*cassandrastore.Store, error) {
	store, err := retry(ctx, log, "waiting for the lock schema (the baton operator creates it)",
		func() (*cassandrastore.Store, error) { return cassandrastore.New(ctx, session, opts...) },
		func(err error) bool { return errors.Is(err, cassandrastore.ErrSchemaMissing) }, failed, redact)
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
// doubling to 5s between attempts, logging msg with the failure as redact leaves it (no user
// name or password) and calling failed at each retried failure. When ctx ends first, the error
// wraps ctx's error and the last failure, redacted. It does not redact what failed is given, nor
// the error it returns for a failure retryable refuses: its caller does.
func retry[T any](ctx context.Context, log logr.Logger, msg string, f func() (T, error), retryable func(error) bool,
	failed func(attempt int, err error), redact func(error) error) (T, error) {
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := f()
		if err == nil || !retryable(err) {
			return v, err
		}
		log.Info(msg, "attempt", attempt, "err", redact(err).Error())
		failed(attempt, err)
		if cerr := ctxtime.Sleep(ctx, backoff); cerr != nil {
			var zero T
			return zero, fmt.Errorf("%w (last error: %w)", cerr, redact(err))
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
