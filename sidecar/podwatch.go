package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// PodWatch reads the sidecar's pod and tells the Holder (PodReading) what it needs: the readiness
// of the pod's app containers (every container in spec.containers; the sidecar is an init
// container) as the kubelet reports it, and the operator's annotation baton.dev/superseded.
//
// With handoff NewestRevision it also answers the annotation with the pod condition
// baton.dev/stepped-aside, which the operator waits for before it marks an old holder:
//
//   - True, with the annotation's value as its message, once the Holder says it stepped aside for
//     that mark (Holder.SteppedAside: it takes no grant while the mark stays);
//   - False before the Holder is told of a reading without the mark, so that the Holder never
//     takes a grant while the pod says True. That write is conditioned on the pod's
//     resourceVersion as read: if the operator marked the pod again since, it fails, the pod is
//     read again, and the Holder keeps away.
//
// It reads the pod from the answer to a PATCH of the pod's status that changes nothing. The
// sidecar's Role has no get on pods, on purpose: RBAC cannot limit a read to the reader's own pod,
// while the admission policy baton-sidecar-own-pod limits every patch of a sidecar's service
// account to the pod its token is bound to. The API server answers a patch with the whole object,
// and does not write an object a patch leaves unchanged.
type PodWatch struct {
	client  kubernetes.Interface
	ns, pod string
	uid     types.UID
	period  time.Duration
	reader  PodReader
	handoff bool // handoff NewestRevision: answer the superseded mark
	log     logr.Logger

	failing bool // the last reading failed (logged once per outage)
}

// podWatchPeriod is how often a PodWatch reads the pod: a fifth of yieldWhenUnready, between
// 500ms and 5s, and at most handoffPeriod with handoff NewestRevision. A lock is given up at most
// one period after yieldWhenUnready (plus the kubelet's own probe delay), or after the operator
// marked the pod superseded.
func podWatchPeriod(opts Options) time.Duration {
	p := 5 * time.Second
	if opts.YieldWhenUnready > 0 {
		p = min(max(opts.YieldWhenUnready/5, 500*time.Millisecond), p)
	}
	if opts.Handoff == batonv1.HandoffNewestRevision {
		p = min(p, handoffPeriod)
	}
	return p
}

// handoffPeriod bounds the reading period with handoff NewestRevision: how long a superseded
// holder may keep the lock after the operator marked it.
const handoffPeriod = time.Second

// PodReader takes a PodWatch's readings; the Holder is one.
type PodReader interface {
	// PodReading records one reading of the pod.
	PodReading(PodReading)
	// SteppedAside reports, waiting while ctx lasts, whether the reader takes no grant while the
	// pod carries the superseded mark mark (see Holder.SteppedAside).
	SteppedAside(ctx context.Context, mark string) bool
}

// NewPodWatch returns a watch of the pod in opts that tells reader (the Holder) of each reading,
// every podWatchPeriod. Read needs no reader.
func NewPodWatch(client kubernetes.Interface, opts Options, reader PodReader, log logr.Logger) *PodWatch {
	return &PodWatch{client: client, ns: opts.Pod.Namespace, pod: opts.Pod.Name, uid: types.UID(opts.Pod.UID),
		period: podWatchPeriod(opts), reader: reader, handoff: opts.Handoff == batonv1.HandoffNewestRevision, log: log}
}

// Run reads the pod every period until ctx ends. A failed reading reports nothing: the holder
// keeps what it holds while the API server cannot tell it the app's state.
func (w *PodWatch) Run(ctx context.Context) {
	tick := time.NewTicker(w.period)
	defer tick.Stop()
	for {
		w.readOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *PodWatch) readOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(w.period, 2*time.Second))
	defer cancel()
	at := time.Now()
	pod, err := w.readPod(rctx)
	if err == nil && w.handoff {
		pod, err = w.withdrawStale(rctx, pod)
	}
	if err != nil {
		if ctx.Err() == nil && !w.failing {
			w.log.Info("cannot read the pod; keeping the locks as they are until it can be read", "err", err.Error())
		}
		w.failing = true
		return
	}
	r := reading(pod, at)
	if w.failing {
		w.log.Info("reading the pod again", "appReady", r.AppReady, "superseded", r.Superseded)
		w.failing = false
	}
	w.reader.PodReading(r)
	if w.handoff {
		w.stepAside(rctx, pod)
	}
}

// Read reads the pod: whether every app container is ready (and when not, which are not), and
// its annotation baton.dev/superseded.
func (w *PodWatch) Read(ctx context.Context) (PodReading, error) {
	at := time.Now()
	pod, err := w.readPod(ctx)
	if err != nil {
		return PodReading{}, err
	}
	return reading(pod, at), nil
}

func reading(pod *corev1.Pod, at time.Time) PodReading {
	r := PodReading{Superseded: pod.Annotations[batonv1.AnnotationSuperseded], At: at}
	r.AppReady, r.Detail = appContainersReady(pod)
	return r
}

// readPod reads the pod from the answer to a patch of its status that changes nothing.
func (w *PodWatch) readPod(ctx context.Context) (*corev1.Pod, error) {
	pod, err := w.client.CoreV1().Pods(w.ns).Patch(ctx, w.pod, types.StrategicMergePatchType, []byte("{}"), metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s through a patch of its status that changes nothing: %w", w.ns, w.pod, err)
	}
	return pod, w.checkUID(pod)
}

func (w *PodWatch) checkUID(pod *corev1.Pod) error {
	if w.uid != "" && pod.UID != w.uid {
		return fmt.Errorf("pod %s/%s is now UID %s, not this pod (%s)", w.ns, w.pod, pod.UID, w.uid)
	}
	return nil
}

// staleReadTries bounds how often withdrawStale reads the pod again after its write met a newer
// pod (a conflict) within one reading.
const staleReadTries = 3

// withdrawStale sets the condition baton.dev/stepped-aside False when pod says True but no longer
// carries the mark it was set for, before the Holder hears of the reading: conditioned on pod's
// resourceVersion, so that the write fails if the operator marked the pod since. It returns the
// pod as written (or as read again after a conflict), which is the reading to report.
func (w *PodWatch) withdrawStale(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	for try := 1; ; try++ {
		if SteppedAsideFor(pod) == "" || pod.Annotations[batonv1.AnnotationSuperseded] != "" {
			return pod, nil // nothing to withdraw, or marked: the Holder keeps away anyway
		}
		written, err := w.patchSteppedAside(ctx, pod.ResourceVersion, corev1.ConditionFalse, "NotSuperseded",
			"the pod is not marked superseded: the sidecar takes grants again")
		switch {
		case err == nil:
			w.log.Info("the superseded mark is gone: withdrew stepped-aside before taking grants again")
			return written, nil
		case !apierrors.IsConflict(err) || try == staleReadTries:
			return nil, err
		}
		if pod, err = w.readPod(ctx); err != nil {
			return nil, err
		}
	}
}

// stepAside sets the condition baton.dev/stepped-aside True with pod's superseded mark as its
// message, once the reader (the Holder) stepped aside for that mark; it does nothing when pod
// carries no mark or says so already. When the reader does not step aside while ctx lasts, the
// next reading tries again.
func (w *PodWatch) stepAside(ctx context.Context, pod *corev1.Pod) {
	mark := pod.Annotations[batonv1.AnnotationSuperseded]
	if mark == "" || SteppedAsideFor(pod) == mark || !w.reader.SteppedAside(ctx, mark) {
		return
	}
	if _, err := w.patchSteppedAside(ctx, "", corev1.ConditionTrue, "Superseded", mark); err != nil {
		if ctx.Err() == nil {
			w.log.Info("cannot tell the operator that the sidecar stepped aside; trying again at the next reading", "err", err.Error())
		}
		return
	}
	w.log.Info("stepped aside: the sidecar takes no grant while the pod is marked superseded", "mark", mark)
}

// patchSteppedAside writes the condition baton.dev/stepped-aside, conditioned on resourceVersion
// when given, and returns the pod as written.
func (w *PodWatch) patchSteppedAside(ctx context.Context, resourceVersion string, status corev1.ConditionStatus, reason, msg string) (*corev1.Pod, error) {
	patch := map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: batonv1.ConditionSteppedAside, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.Now(),
	}}}}
	if resourceVersion != "" {
		patch["metadata"] = map[string]any{"resourceVersion": resourceVersion}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	pod, err := w.client.CoreV1().Pods(w.ns).Patch(ctx, w.pod, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if err != nil {
		return nil, fmt.Errorf("setting condition %s %s on pod %s/%s: %w", batonv1.ConditionSteppedAside, status, w.ns, w.pod, err)
	}
	return pod, w.checkUID(pod)
}

// SteppedAsideFor returns the message of pod's condition baton.dev/stepped-aside when it is True
// (the superseded mark its sidecar stepped aside for), "" otherwise.
func SteppedAsideFor(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == batonv1.ConditionSteppedAside && c.Status == corev1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}

// appContainersReady reports whether every container in pod.spec.containers is ready as the
// kubelet last reported it (a container without a status is not ready), and names those that are
// not, with why when the status says.
func appContainersReady(pod *corev1.Pod) (bool, string) {
	statuses := make(map[string]corev1.ContainerStatus, len(pod.Status.ContainerStatuses))
	for _, s := range pod.Status.ContainerStatuses {
		statuses[s.Name] = s
	}
	var notReady []string
	for _, c := range pod.Spec.Containers {
		s, ok := statuses[c.Name]
		switch {
		case !ok:
			notReady = append(notReady, "container "+c.Name+" has no status yet")
		case s.Ready:
		case s.State.Waiting != nil:
			notReady = append(notReady, fmt.Sprintf("container %s waiting: %s", c.Name, s.State.Waiting.Reason))
		case s.State.Terminated != nil:
			notReady = append(notReady, fmt.Sprintf("container %s terminated: %s", c.Name, s.State.Terminated.Reason))
		default:
			notReady = append(notReady, "container "+c.Name+" not ready")
		}
	}
	return len(notReady) == 0, strings.Join(notReady, ", ")
}
