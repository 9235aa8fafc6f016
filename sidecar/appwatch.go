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
)

// AppWatch reads the readiness of the pod's app containers (every container in spec.containers;
// the sidecar is an init container) as the kubelet reports it, and tells the Holder.
//
// It reads the pod from the answer to a PATCH of the pod's status that changes nothing. The
// sidecar's Role has no get on pods, on purpose: RBAC cannot limit a read to the reader's own pod,
// while the admission policy baton-sidecar-own-pod limits every patch of a sidecar's service
// account to the pod its token is bound to. The API server answers a patch with the whole object,
// and does not write an object a patch leaves unchanged.
type AppWatch struct {
	client  kubernetes.Interface
	ns, pod string
	uid     types.UID
	period  time.Duration
	report  func(ready bool, detail string, at time.Time)
	log     logr.Logger

	failing bool // the last reading failed (logged once per outage)
}

// AppWatchPeriod is how often an AppWatch reads the pod for a given yieldWhenUnready: a fifth of
// it, between 500ms and 5s. A lock is given up at most one period after yieldWhenUnready (plus the
// kubelet's own probe delay).
func AppWatchPeriod(yieldWhenUnready time.Duration) time.Duration {
	return min(max(yieldWhenUnready/5, 500*time.Millisecond), 5*time.Second)
}

// NewAppWatch returns a watch of the pod in opts that calls report (Holder.AppReadiness) with each
// reading, every AppWatchPeriod.
func NewAppWatch(client kubernetes.Interface, opts Options, report func(ready bool, detail string, at time.Time), log logr.Logger) *AppWatch {
	return &AppWatch{client: client, ns: opts.Pod.Namespace, pod: opts.Pod.Name, uid: types.UID(opts.Pod.UID),
		period: AppWatchPeriod(opts.YieldWhenUnready), report: report, log: log}
}

// Run reads the pod every period until ctx ends. A failed reading reports nothing: the holder
// keeps what it holds while the API server cannot tell it the app's state.
func (w *AppWatch) Run(ctx context.Context) {
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

func (w *AppWatch) readOnce(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(w.period, 2*time.Second))
	defer cancel()
	ready, detail, err := w.Read(rctx)
	if err != nil {
		if ctx.Err() == nil && !w.failing {
			w.log.Info("cannot read the app's readiness; keeping the locks until it can be read", "err", err.Error())
		}
		w.failing = true
		return
	}
	if w.failing {
		w.log.Info("reading the app's readiness again", "ready", ready)
		w.failing = false
	}
	w.report(ready, detail, time.Now())
}

// Read returns whether every app container of the pod is ready and, when not, which are not.
func (w *AppWatch) Read(ctx context.Context) (ready bool, detail string, err error) {
	pod, err := w.client.CoreV1().Pods(w.ns).Patch(ctx, w.pod, types.StrategicMergePatchType, []byte("{}"), metav1.PatchOptions{}, "status")
	if err != nil {
		return false, "", fmt.Errorf("reading pod %s/%s through a patch of its status that changes nothing: %w", w.ns, w.pod, err)
	}
	if w.uid != "" && pod.UID != w.uid {
		return false, "", fmt.Errorf("pod %s/%s is now UID %s, not this pod (%s)", w.ns, w.pod, pod.UID, w.uid)
	}
	ready, detail = AppContainersReady(pod)
	return ready, detail, nil
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
