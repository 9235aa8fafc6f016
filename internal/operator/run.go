package operator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/controllers/sidecaraccess"
	"github.com/baton-dev/baton/internal/certfiles"
	"github.com/baton-dev/baton/internal/ctxtime"
	"github.com/baton-dev/baton/internal/storepool"
	batonwebhook "github.com/baton-dev/baton/internal/webhook"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// The certificate rotator caches every MutatingWebhookConfiguration (it selects none by name) and
// writes the caBundle of one: the chart's baton-inject (--webhook-configuration; another name needs
// this rule changed).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,verbs=update,resourceNames=baton-inject
// The webhook Secret and the leader-election Lease live in the operator's namespace; the chart
// grants those with a Role there.

// The metrics endpoint authenticates each scrape with a TokenReview and authorizes it with a
// SubjectAccessReview (get on /metrics):
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// nativeSidecarsSince is the first Kubernetes minor version with native sidecars on by default.
const nativeSidecarsSince = "1.29.0"

// RESTConfig returns the client configuration of o: --kubeconfig, else $KUBECONFIG or
// ~/.kube/config, else the in-cluster configuration. Its client-side rate limit is o's
// (--kube-api-qps, --kube-api-burst); Run sets the same on whatever configuration it is given.
func RESTConfig(o Options) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("operator: Kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "baton-operator"
	return WithClientLimits(o, cfg), nil
}

// WithClientLimits returns a copy of cfg with o's client-side rate limit (--kube-api-qps,
// --kube-api-burst), replacing whatever cfg had: a configuration loaded from a kubeconfig or in
// a cluster has none, and client-go then allows 5 requests per second. cfg is not changed. It
// does not set a RateLimiter; one already in cfg overrides QPS and Burst (client-go's rule).
func WithClientLimits(o Options, cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS = float32(o.KubeAPIQPS)
	c.Burst = o.KubeAPIBurst
	return c
}

// Scheme returns the types the operator works with.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(s), batonv1.AddToScheme(s)); err != nil {
		return nil, fmt.Errorf("operator: scheme: %w", err)
	}
	return s, nil
}

// Run runs the operator until ctx ends. log receives every log line: it is the manager's logger,
// from which controller-runtime derives each reconcile's logger (with the controller's name, the
// request and the reconcileID), which the reconcilers take from their context. Its phases: check
// the options and the cluster, build the manager, add the controllers, add the webhook and its
// certificate, add the health checks, and run the manager. Its API client uses o's client-side
// rate limit, whatever cfg says (WithClientLimits).
func Run(ctx context.Context, o Options, cfg *rest.Config, log logr.Logger) error {
	cfg = WithClientLimits(o, cfg)
	scheme, defaults, err := prepare(&o, cfg, log)
	if err != nil {
		return err
	}
	mgr, err := newManager(o, cfg, scheme, log)
	if err != nil {
		return err
	}
	stores, closePool, err := addControllers(mgr, o, defaults, log)
	if err != nil {
		return err
	}
	defer closePool()
	webhookUp, err := addWebhook(ctx, mgr, o, cfg, stores, log)
	if err != nil {
		return err
	}
	if err := addHealthChecks(mgr, webhookUp); err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// prepare validates o, decides the native-sidecar mode (asking the API server in auto mode) into
// o.Inject, logs the settings and reads the operator's own Cassandra credentials. It starts
// nothing.
func prepare(o *Options, cfg *rest.Config, log logr.Logger) (*runtime.Scheme, cassandrastore.Credentials, error) {
	var none cassandrastore.Credentials
	if err := o.Validate(); err != nil {
		return nil, none, err
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, none, err
	}
	if o.Inject.NativeSidecars, err = nativeSidecars(o.NativeSidecars, cfg); err != nil {
		return nil, none, err
	}
	log.Info("starting", "namespace", o.Namespace, "sidecarImage", o.Inject.Image, "nativeSidecars", o.Inject.NativeSidecars,
		"cassandra", o.Inject.Cassandra.ContactPoints, "webhookCerts", o.WebhookCerts, "globalNamespaces", o.Inject.GlobalNamespaces,
		"kubeAPIQPS", o.KubeAPIQPS, "kubeAPIBurst", o.KubeAPIBurst)
	defaults, err := o.defaultCredentials()
	if err != nil {
		return nil, none, err
	}
	return scheme, defaults, nil
}

// newManager builds the controller-runtime manager: metrics, probes, leader election (the
// reconcilers stop as soon as leadership is lost; the process exits and restarts), the webhook
// server (not started before its certificate, see addWebhook) and the shared cache.
func newManager(o Options, cfg *rest.Config, scheme *runtime.Scheme, log logr.Logger) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        log,
		Metrics:                       metricsOptions(o),
		HealthProbeBindAddress:        o.ProbeAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		WebhookServer:                 webhook.NewServer(webhook.Options{Port: o.WebhookPort, CertDir: o.WebhookCertDir}),
		// What the shared cache holds, and why that serves every reader: see CacheOptions.
		Cache:      CacheOptions(),
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(o.SharedProcess)},
	})
	if err != nil {
		return nil, fmt.Errorf("operator: manager: %w", err)
	}
	return mgr, nil
}

// addControllers adds the DistributedLock controller (with its store pool and metrics) and the
// sidecar-access controller to mgr. stores is the connection policy the webhook shares;
// closePool closes the pool's connections once the manager stopped.
func addControllers(mgr ctrl.Manager, o Options, defaults cassandrastore.Credentials, log logr.Logger) (stores *controllers.PoolSource, closePool func(), err error) {
	stores = &controllers.PoolSource{Secrets: mgr.GetAPIReader(), Config: o.Inject, Defaults: defaults,
		AllowedContactPoints: o.CassandraAllowedHosts, OperatorKeyspaces: o.OperatorKeyspaces, AllowAnonymous: o.AllowAnonymousCassandra,
		EnsureSchema: o.EnsureSchema}
	pool := storepool.New(storepool.WithLogger(log.WithName("storepool")), ensureSchema(o, stores.EnsuresSchema))
	stores.Pool = pool
	if defaults.Username == "" && (defaults.TLS == nil || len(defaults.TLS.Cert) == 0) && !o.AllowAnonymousCassandra {
		log.Info("no Cassandra credentials of the operator's own: it creates the schema in its keyspaces without a login, " +
			"which a Cassandra with authentication refuses; every DistributedLock names its own credentials " +
			"(or start with --cassandra-allow-anonymous for a Cassandra without authentication)")
	}
	metrics := controllers.NewMetrics()
	if err := metrics.Register(ctrlmetrics.Registry); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("operator: %w", err)
	}
	reconciler := &controllers.DistributedLockReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Stores:    stores,
		Recorder:  mgr.GetEventRecorder("baton-operator"),
		Config:    o.Inject,
		Interval:  o.StatusInterval,
		Metrics:   metrics,
		// Each lock's store reads may wait on its Cassandra; the pool bounds how long a
		// connection attempt holds a worker (storepool.DefaultConnectWait) and leaves a failed
		// connection alone for a growing delay (storepool.DefaultRetryInitial to DefaultRetryMax).
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("operator: %w", err)
	}
	if err := (&sidecaraccess.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("operator: %w", err)
	}
	return stores, func() { pool.Close() }, nil
}

// addWebhook adds the injecting webhook to mgr once its certificate is ready (see
// addWebhookCerts), so that the webhook server never starts without one. webhookUp is closed
// once it is registered; never if ctx ends first.
func addWebhook(ctx context.Context, mgr ctrl.Manager, o Options, cfg *rest.Config, stores *controllers.PoolSource,
	log logr.Logger) (webhookUp <-chan struct{}, err error) {
	injector, err := batonwebhook.NewPodInjector(mgr.GetClient(), o.Inject, batonwebhook.WithLogger(log.WithName("webhook")),
		batonwebhook.WithLiveReader(mgr.GetAPIReader()), batonwebhook.WithConnectionPolicy(stores.Refuses))
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	certsReady := make(chan struct{})
	if err := addWebhookCerts(ctx, mgr, o, cfg, certsReady, log); err != nil {
		return nil, err
	}
	up := make(chan struct{})
	go func() {
		select {
		case <-certsReady:
		case <-ctx.Done():
			return
		}
		// Adding the webhook server now (GetWebhookServer adds it to the running manager) means
		// it never starts without a certificate.
		mgr.GetWebhookServer().Register(batonwebhook.Path, &admission.Webhook{Handler: injector})
		close(up)
		log.Info("webhook serving", "port", o.WebhookPort, "path", batonwebhook.Path)
	}()
	return up, nil
}

// addWebhookCerts arranges for certsReady to be closed once the webhook's certificate is in
// o.WebhookCertDir. With --webhook-certs=self it adds the certificate rotator (which fills the
// webhook Secret and the caBundle of the webhook configuration) and the mirror that writes the
// Secret's files; otherwise it waits for the files mounted from a Secret cert-manager fills.
func addWebhookCerts(ctx context.Context, mgr ctrl.Manager, o Options, cfg *rest.Config, certsReady chan struct{}, log logr.Logger) error {
	if o.WebhookCerts != CertsSelf {
		go waitForCertFiles(ctx, o.WebhookCertDir, certsReady, log)
		return nil
	}
	if err := ensureSecret(ctx, mgr.GetAPIReader(), mgr.GetClient(), o.Namespace, o.WebhookSecret, secretBackoff, log); err != nil {
		return err
	}
	dns := o.WebhookService + "." + o.Namespace + ".svc"
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.WebhookSecret},
		CertDir:        o.WebhookCertDir,
		CAName:         "baton-webhook-ca",
		CAOrganization: "baton",
		DNSName:        dns,
		ExtraDNSNames:  append([]string{dns + ".cluster.local", o.WebhookService + "." + o.Namespace}, o.WebhookExtraDNSNames...),
		IsReady:        certsReady,
		Webhooks:       []rotator.WebhookInfo{{Name: o.WebhookConfiguration, Type: rotator.Mutating}},
		// Every replica serves the webhook, so every replica keeps the certificate current;
		// concurrent rotations are settled by the Secret's resourceVersion.
		RequireLeaderElection: false,
		ControllerName:        rotatorName(o),
	})
	if err != nil {
		return fmt.Errorf("operator: webhook certificate rotator: %w", err)
	}
	// The rotator writes the Secret; the operator writes the files the webhook server reads
	// from it itself, at once, rather than wait for the kubelet to refresh a Secret volume
	// (see internal/certfiles).
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if err := mgr.Add(&certfiles.Mirror{Client: kc, Namespace: o.Namespace, Name: o.WebhookSecret, Dir: o.WebhookCertDir,
		Keys: []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey}, Log: log.WithName("certfiles")}); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// addHealthChecks adds the liveness check (the process answers) and the readiness check (the
// webhook is registered and its server started; not guaranteed: that its certificate is still
// valid).
func addHealthChecks(mgr ctrl.Manager, webhookUp <-chan struct{}) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		select {
		case <-webhookUp:
			return mgr.GetWebhookServer().StartedChecker()(req)
		default:
			return errors.New("webhook certificate not ready yet")
		}
	}); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	return nil
}

// secretBackoff paces ensureSecret's reads of the webhook Secret while the API server fails them.
var secretBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 15 * time.Second}

// forbiddenCreateMessage is what ensureSecret logs when it may not create the missing Secret.
const forbiddenCreateMessage = "the webhook Secret is missing and the operator may not create it: the chart ships it " +
	"(helm upgrade restores it); the certificate rotator fills it once it exists"

// ensureSecret creates the (empty) Secret the certificate rotator fills, unless it exists; the
// chart ships it and grants no create. The manager's cache is not running yet: it reads through
// the API reader and writes with the client (writes never go through the cache).
//
// A failed read is retried, paced by backoff, until ctx ends (then it returns ctx's error): a
// read the API server fails for a moment must not end the operator. Only a read that finds no
// Secret leads to a Create; a Create the API server forbids means the chart owns the Secret, which
// is logged and not an error. Not guaranteed: that the Secret exists when ensureSecret returns nil.
func ensureSecret(ctx context.Context, r client.Reader, w client.Writer, namespace, name string, backoff wait.Backoff, log logr.Logger) error {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Labels: map[string]string{"app.kubernetes.io/name": "baton", "app.kubernetes.io/component": "webhook"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil},
	}
	for {
		err := r.Get(ctx, client.ObjectKeyFromObject(sec), &corev1.Secret{})
		if err == nil {
			return nil
		}
		if apierrors.IsNotFound(err) {
			break
		}
		pause := backoff.Step()
		log.Info("reading the webhook Secret failed; retrying", "secret", namespace+"/"+name, "in", pause.String(), "err", err.Error())
		if err := ctxtime.Sleep(ctx, pause); err != nil {
			return fmt.Errorf("operator: reading webhook Secret %s/%s: %w", namespace, name, err)
		}
	}
	err := w.Create(ctx, sec)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err):
		log.Info(forbiddenCreateMessage, "secret", namespace+"/"+name)
		return nil
	}
	return fmt.Errorf("operator: creating webhook Secret %s/%s: %w", namespace, name, err)
}

// metricsOptions serves the metrics as Kubebuilder scaffolds it: with --metrics-secure over TLS
// (the certificate in --metrics-cert-dir, else a self-signed one made at start, which Prometheus
// cannot verify), and only to a client whose bearer token the API server authenticates and
// authorizes for get on /metrics. Every scrape then costs a TokenReview and a
// SubjectAccessReview, which controller-runtime caches for a minute (not guaranteed: a revoked
// right may still read for that long).
func metricsOptions(o Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
		m.CertDir = o.MetricsCertDir
	}
	return m
}

// ensureSchema is the pool's schema option: with --cassandra-ensure-schema, the schema of the connections
// for which only says so.
func ensureSchema(o Options, only func(cassandrastore.Connection) bool) storepool.Option {
	if !o.EnsureSchema {
		return func(*storepool.Pool) {}
	}
	return storepool.WithEnsureSchema(o.SchemaReplication, only)
}

// nativeSidecars decides the native-sidecar mode, asking the server for its version in auto mode.
func nativeSidecars(mode string, cfg *rest.Config) (bool, error) {
	switch mode {
	case NativeTrue:
		return true, nil
	case NativeFalse:
		return false, nil
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return false, fmt.Errorf("operator: discovery client: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return false, fmt.Errorf("operator: reading the server version for --native-sidecars=auto: %w", err)
	}
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		return false, fmt.Errorf("operator: server version %q (set --native-sidecars=true or false): %w", info.GitVersion, err)
	}
	return v.AtLeast(version.MustParseGeneric(nativeSidecarsSince)), nil
}

// defaultCredentials reads the operator's own Cassandra credentials files.
func (o Options) defaultCredentials() (cassandrastore.Credentials, error) {
	var c cassandrastore.Credentials
	read := func(flagName, path string) ([]byte, error) {
		if path == "" {
			return nil, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("operator: --%s: %w", flagName, err)
		}
		return b, nil
	}
	user, err1 := read("cassandra-username-file", o.CassandraUsernameFile)
	pass, err2 := read("cassandra-password-file", o.CassandraPasswordFile)
	ca, err3 := read("cassandra-tls-ca", o.CassandraTLSCA)
	cert, err4 := read("cassandra-tls-cert", o.CassandraTLSCert)
	key, err5 := read("cassandra-tls-key", o.CassandraTLSKey)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return c, err
	}
	c.Username, c.Password = strings.TrimRight(string(user), "\r\n"), strings.TrimRight(string(pass), "\r\n")
	if len(ca) > 0 || len(cert) > 0 {
		c.TLS = &cassandrastore.TLS{CA: ca, Cert: cert, Key: key, ServerName: o.Inject.Cassandra.TLSServerName}
	}
	return c, nil
}

// waitForCertFiles closes ready once dir holds tls.crt and tls.key (mounted by the kubelet from
// the Secret cert-manager fills), checking every second.
func waitForCertFiles(ctx context.Context, dir string, ready chan<- struct{}, log logr.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for waited := 0; ; waited++ {
		_, errCert := os.Stat(filepath.Join(dir, "tls.crt"))
		_, errKey := os.Stat(filepath.Join(dir, "tls.key"))
		if errCert == nil && errKey == nil {
			close(ready)
			return
		}
		if waited%30 == 0 {
			log.Info("waiting for the webhook certificate", "dir", dir)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rotatorName names the certificate rotator's controller: cert-controller's own name, unless
// several operators share the process, where each needs its own (its webhook port tells them apart).
func rotatorName(o Options) string {
	if o.SharedProcess {
		return fmt.Sprintf("cert-rotator-%d", o.WebhookPort)
	}
	return "cert-rotator"
}
