package sidecar

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// PodWatch reads the sidecar's pod and tells the Holder (PodReading) what it needs: the readiness
// of the pod's app containers (every container in spec.containers; the sidecar is an init
// container) as the kubelet reports it, and the operator's annotation baton.dev/superseded.
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
	report  func(PodReading)
	log     logr.Logger

	failing bool // the last reading failed (logged once per outage)
}

// PodWatchPeriod is how often a PodWatch reads the pod: a fifth of yieldWhenUnready, between
// 500ms and 5s, and at most handoffPeriod with handoff NewestRevision. A lock is given up at most
// one period after yieldWhenUnready (plus the kubelet's own probe delay), or after the operator
// marked the pod superseded.
func PodWatchPeriod(opts Options) time.Duration {
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

// NewPodWatch returns a watch of the pod in opts that calls report (Holder.PodReading) with each
// reading, every PodWatchPeriod.
func NewPodWatch(client kubernetes.Interface, opts Options, report func(PodReading), log logr.Logger) *PodWatch {
	return &PodWatch{client: client, ns: opts.Pod.Namespace, pod: opts.Pod.Name, uid: types.UID(opts.Pod.UID),
		period: PodWatchPeriod(opts), report: report, log: log}
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
	r, err := w.Read(rctx)
	if err != nil {
		if ctx.Err() == nil && !w.failing {
			w.log.Info("cannot read the pod; keeping the locks as they are until it can be read", "err", err.Error())
		}
		w.failing = true
		return
	}
	if w.failing {
		w.log.Info("reading the pod again", "appReady", r.AppReady, "superseded", r.Superseded)
		w.failing = false
	}
	w.report(r)
}

// Read reads the pod: whether every app container is ready (and when not, which are not), and
// its annotation baton.dev/superseded.
func (w *PodWatch) Read(ctx context.Context) (PodReading, error) {
	at := time.Now()
	pod, err := w.client.CoreV1().Pods(w.ns).Patch(ctx, w.pod, types.StrategicMergePatchType, []byte("{}"), metav1.PatchOptions{}, "status")
	if err != nil {
		return PodReading{}, fmt.Errorf("reading pod %s/%s through a patch of its status that changes nothing: %w", w.ns, w.pod, err)
	}
	if w.uid != "" && pod.UID != w.uid {
		return PodReading{}, fmt.Errorf("pod %s/%s is now UID %s, not this pod (%s)", w.ns, w.pod, pod.UID, w.uid)
	}
	r := PodReading{Superseded: pod.Annotations[batonv1.AnnotationSuperseded], At: at}
	r.AppReady, r.Detail = AppContainersReady(pod)
	return r, nil
}

// AppContainersReady reports whether every container in pod.spec.containers is ready as the
// kubelet last reported it (a container without a status is not ready), and names those that are
// not, with why when the status says.
func AppContainersReady(pod *corev1.Pod) (bool, string) {
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
