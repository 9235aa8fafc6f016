package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// PodInjector is the admission.Handler of the sidecar-injecting webhook. Build it with
// NewPodInjector; it is safe for concurrent use.
//
// At creation it denies a pod that already carries baton's injection markers (inject.Marked);
// it allows every other pod inject.Required declines, unchanged; it denies a pod whose
// DistributedLock does not exist (inject.MissingLockError) or cannot be injected from, or whose
// Cassandra connection the operator refuses (WithConnectionPolicy); it answers
// 500 when the lock cannot be read, so that the API server's failurePolicy decides (Fail: the pod
// is rejected and its controller retries). At an update it denies any change of the markers
// (the configuration sends it only those updates) and allows everything else.
type PodInjector struct {
	client  client.Reader
	live    client.Reader // confirms a not-found from client; nil: client is trusted
	config  inject.Config
	decoder admission.Decoder
	log     logr.Logger
	// refuses says why the operator refuses the lock's Cassandra connection (nil: it does not,
	// or no check was configured).
	refuses func(context.Context, *batonv1.DistributedLock) error
}

var _ admission.Handler = (*PodInjector)(nil)

// Option configures a PodInjector.
type Option func(*PodInjector)

// WithLogger sets the logger of admission decisions (default: discard).
func WithLogger(l logr.Logger) Option { return func(p *PodInjector) { p.log = l } }

// WithLiveReader sets an uncached reader (the manager's API reader) that confirms a
// DistributedLock the cached client does not have yet before the pod is denied: a lock created
// moments before its pods may not have reached the cache.
func WithLiveReader(r client.Reader) Option { return func(p *PodInjector) { p.live = r } }

// WithConnectionPolicy has the injector deny a pod whose DistributedLock's Cassandra connection
// the operator refuses: refuses returns why (nil when it allows it). The sidecar would otherwise
// connect where the operator will not, with the Secrets the lock names mounted into the pod: a
// DistributedLock author could send a Secret of the namespace to a host of their choosing. The
// check is the operator's own (contact-point allow-list, Secrets labelled for baton, credentials
// required); an error it cannot decide on (reading a Secret failed) must be returned as nil, so
// that the pod is injected as before and its sidecar reports the problem itself.
func WithConnectionPolicy(refuses func(context.Context, *batonv1.DistributedLock) error) Option {
	return func(p *PodInjector) { p.refuses = refuses }
}

// NewPodInjector returns a PodInjector that reads DistributedLocks through c (typically the
// manager's cached client, whose scheme must know batonv1) and injects with cfg. It validates cfg,
// so that a bad operator setting is found at start instead of at the first pod.
func NewPodInjector(c client.Reader, cfg inject.Config, opts ...Option) (*PodInjector, error) {
	if c == nil {
		return nil, errors.New("webhook: no client to read DistributedLocks")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &PodInjector{client: c, config: cfg, log: logr.Discard()}
	for _, o := range opts {
		o(p)
	}
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("webhook: build scheme: %w", err)
	}
	p.decoder = admission.NewDecoder(s)
	return p, nil
}

// Handle answers one AdmissionReview for a pod.
func (p *PodInjector) Handle(ctx context.Context, req admission.Request) admission.Response {
	log := p.log.WithValues("namespace", req.Namespace, "name", req.Name, "uid", req.UID)
	switch {
	case req.Operation == admissionv1.Update:
		// The pod itself or a subresource that takes the whole pod (status, ...).
		return p.handleUpdate(log, req)
	case req.SubResource != "" || (req.Operation != "" && req.Operation != admissionv1.Create):
		return admission.Allowed("baton injects pods only when they are created")
	}
	pod := &corev1.Pod{}
	if err := p.decoder.Decode(req, pod); err != nil {
		log.Error(err, "decoding pod")
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("baton: decode pod: %w", err))
	}
	if reason := inject.Marked(pod); reason != "" {
		log.Info("denied", "reason", reason)
		return admission.Denied("baton: " + reason)
	}
	if ok, reason := inject.Required(pod); !ok {
		log.V(1).Info("not injecting", "reason", reason)
		return admission.Allowed(reason)
	}

	// The pod's own namespace may be empty at admission (generateName, namespace from the URL).
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	name := strings.TrimSpace(pod.Annotations[batonv1.AnnotationLock])
	dl := &batonv1.DistributedLock{}
	key := client.ObjectKey{Namespace: ns, Name: name}
	err := p.client.Get(ctx, key, dl)
	if p.live != nil && (apierrors.IsNotFound(err) || (err == nil && dl.Status.CassandraClusterName == "")) {
		// A lock created moments ago may not be cached yet, or its first status (which records
		// the Cassandra cluster the sidecar must insist on) may not be: ask the API server.
		fresh := &batonv1.DistributedLock{}
		if liveErr := p.live.Get(ctx, key, fresh); liveErr == nil || apierrors.IsNotFound(err) {
			dl, err = fresh, liveErr
		}
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			msg := inject.MissingLockError(ns, name).Error()
			log.Info("denied", "reason", msg)
			return admission.Denied(msg)
		}
		log.Error(err, "reading DistributedLock", "lock", name)
		return admission.Errored(http.StatusInternalServerError,
			fmt.Errorf("baton: read DistributedLock %s/%s: %w", ns, name, err))
	}

	if p.refuses != nil {
		if err := p.refuses(ctx, dl); err != nil {
			msg := fmt.Sprintf("baton: DistributedLock %s/%s: the operator refuses its Cassandra connection, so its sidecar may not make it: %v", ns, name, err)
			log.Info("denied", "reason", msg)
			return admission.Denied(msg)
		}
	}
	out, err := inject.Inject(pod, dl, p.config)
	if err != nil {
		if errors.Is(err, inject.ErrInvalidConfig) {
			log.Error(err, "operator configuration")
			return admission.Errored(http.StatusInternalServerError, err)
		}
		log.Info("denied", "reason", err.Error())
		return admission.Denied(err.Error())
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("baton: encode injected pod: %w", err))
	}
	log.V(1).Info("injected", "lock", ns+"/"+name)
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// handleUpdate denies an update that adds, changes or removes baton's injection markers: they are
// set by the webhook when it injects a pod and trusted by the operator afterwards (inject.Injected).
func (p *PodInjector) handleUpdate(log logr.Logger, req admission.Request) admission.Response {
	pod, old := &corev1.Pod{}, &corev1.Pod{}
	if err := p.decoder.Decode(req, pod); err != nil {
		log.Error(err, "decoding pod")
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("baton: decode pod: %w", err))
	}
	if err := p.decoder.DecodeRaw(req.OldObject, old); err != nil {
		log.Error(err, "decoding old pod")
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("baton: decode old pod: %w", err))
	}
	if markers(pod) != markers(old) {
		msg := fmt.Sprintf("baton: the annotation and label %s are set by baton's webhook when it injects a pod and cannot be added, changed or removed afterwards", batonv1.AnnotationInjected)
		log.Info("denied", "reason", msg)
		return admission.Denied(msg)
	}
	return admission.Allowed("baton's injection markers unchanged")
}

// marked is a pod's injection markers: whether each is present, and its value.
type marked struct {
	annotation, label       string
	hasAnnotation, hasLabel bool
}

func markers(pod *corev1.Pod) marked {
	var m marked
	m.annotation, m.hasAnnotation = pod.Annotations[batonv1.AnnotationInjected]
	m.label, m.hasLabel = pod.Labels[batonv1.LabelInjected]
	return m
}
