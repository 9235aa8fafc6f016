package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/sidecarclient"
)

// gateResync is how often the gate rewrites its state even without a change, repairing edits
// made by others; failed writes are retried sooner, with backoff.
const gateResync = 30 * time.Second

// GateState is what the gate tells Kubernetes.
type GateState struct {
	Held    bool
	Reason  string
	Message string
}

// GateState summarises the holder for the pod's readiness gate.
func (h *Holder) GateState() GateState {
	locks := h.Locks()
	held := h.Ready()
	var parts []string
	for _, st := range locks {
		switch {
		case held:
			parts = append(parts, fmt.Sprintf("%s (token %d)", st.LockID, st.Token))
		case st.State != sidecarclient.StateHeld:
			msg := st.Reason
			if msg == "" {
				msg = string(st.State)
			}
			parts = append(parts, st.LockID+": "+msg)
		}
	}
	if held {
		return GateState{Held: true, Reason: "LockHeld", Message: "holding " + strings.Join(parts, ", ")}
	}
	reason := "WaitingForLock"
	for _, st := range locks {
		if st.State == sidecarclient.StateLost {
			reason = "LockLost"
		}
	}
	return GateState{Reason: reason, Message: strings.Join(parts, "; ")}
}

// Gate writes the holder's state to the pod: the baton.dev/lock-held condition through the
// pods/status subresource (ReadinessGate) or the baton.dev/role label (Label). It runs apart from
// the lock: a slow or unreachable API server never delays self-fencing, only this report.
type Gate struct {
	client  kubernetes.Interface
	ns, pod string
	policy  batonv1.TrafficPolicy
	src     gateSource
	log     logr.Logger

	applied     *GateState
	transitions time.Time
}

// gateSource is what a gate reports: the holder, or the sidecar's startup until the holder runs.
// Changes may return another channel after a change; the gate asks for it each time it waits.
type gateSource interface {
	GateState() GateState
	Changes() <-chan struct{}
}

// NewGate returns a gate for the pod in opts, reporting h.
func NewGate(client kubernetes.Interface, opts Options, h *Holder, log logr.Logger) *Gate {
	return newGate(client, opts, h, log)
}

func newGate(client kubernetes.Interface, opts Options, src gateSource, log logr.Logger) *Gate {
	return &Gate{client: client, ns: opts.Pod.Namespace, pod: opts.Pod.Name, policy: opts.TrafficPolicy, src: src, log: log}
}

// Run reports every change within moments of it until ctx ends, retrying failed writes with
// backoff (100ms up to 5s) and rewriting the state every 30s.
func (g *Gate) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.src.Changes():
		case <-retry.C:
		}
		st := g.src.GateState()
		if err := g.Apply(ctx, st); err != nil {
			if ctx.Err() != nil {
				return
			}
			g.log.Info("reporting lock state to the pod failed, will retry", "err", err.Error(), "retryIn", backoff.String())
			retry.Reset(backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		retry.Reset(gateResync)
	}
}

// Apply writes st to the pod unless it was the last state written.
func (g *Gate) Apply(ctx context.Context, st GateState) error {
	if g.applied != nil && *g.applied == st {
		return nil
	}
	var err error
	switch g.policy {
	case batonv1.TrafficReadinessGate:
		err = g.patchCondition(ctx, st)
	case batonv1.TrafficLabel:
		err = g.patchLabel(ctx, st)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	g.log.Info("reported lock state to the pod", "held", st.Held, "reason", st.Reason, "message", st.Message)
	g.applied = &st
	return nil
}

func (g *Gate) patchCondition(ctx context.Context, st GateState) error {
	status := "False"
	if st.Held {
		status = "True"
	}
	if g.applied == nil || g.applied.Held != st.Held {
		g.transitions = time.Now()
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": batonv1.ConditionLockHeld, "status": status, "reason": st.Reason, "message": st.Message,
		"lastTransitionTime": metav1.NewTime(g.transitions).Rfc3339Copy(),
	}}}})
	if err != nil {
		return err
	}
	_, err = g.client.CoreV1().Pods(g.ns).Patch(ctx, g.pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching condition %s of pod %s/%s: %w", batonv1.ConditionLockHeld, g.ns, g.pod, err)
	}
	return nil
}

func (g *Gate) patchLabel(ctx context.Context, st GateState) error {
	role := batonv1.RoleStandby
	if st.Held {
		role = batonv1.RoleHolder
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{batonv1.LabelRole: role}}})
	if err != nil {
		return err
	}
	_, err = g.client.CoreV1().Pods(g.ns).Patch(ctx, g.pod, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("setting label %s=%s on pod %s/%s: %w", batonv1.LabelRole, role, g.ns, g.pod, err)
	}
	return nil
}

// kubeClient returns a client from the kubeconfig file when given, else the in-cluster config.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	switch {
	case errors.Is(err, rest.ErrNotInCluster):
		return nil, fmt.Errorf("sidecar: traffic policy %s or %s, and %s (--%s), need the Kubernetes API, and this is not a pod (%w): "+
			"outside Kubernetes set %s (--%s) to %s and leave %s unset, or give a kubeconfig with %s (--%s)",
			batonv1.TrafficReadinessGate, batonv1.TrafficLabel, sidecarcontract.YieldWhenUnready.Env(), sidecarcontract.YieldWhenUnready.Flag(),
			err, sidecarcontract.TrafficPolicy.Env(), sidecarcontract.TrafficPolicy.Flag(),
			batonv1.TrafficNone, sidecarcontract.YieldWhenUnready.Env(), sidecarcontract.Kubeconfig.Env(), sidecarcontract.Kubeconfig.Flag())
	case err != nil:
		return nil, fmt.Errorf("sidecar: Kubernetes client config (%s): %w", sidecarcontract.Kubeconfig, err)
	}
	cfg.UserAgent = "baton-sidecar"
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(cfg)
}
