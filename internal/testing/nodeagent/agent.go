// Package nodeagent stands in for the kubelet where there is none (the demo and end-to-end tests
// run a real kube-apiserver without nodes). For every injected pod it runs the baton sidecar as a
// local process with the environment the webhook gave it and a service-account token bound to the
// pod, reports the pod's status the way a kubelet would (phase, IP, container statuses, and Ready
// from the containers and readiness gates, leaving baton's own condition to the sidecar), and
// stops the sidecar with SIGTERM when the pod is deleted. App containers are not run: they count
// as running and ready from the start.
package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/sidecarclient"
)

// Config configures an Agent.
type Config struct {
	// Client talks to the API server as an administrator would (the kubelet's rights).
	Client kubernetes.Interface
	// Server is the API server's REST configuration; sidecars get its host and CA with their own
	// pod-bound token.
	Server *rest.Config
	// SidecarBinary is the sidecar executable (go build ./cmd/sidecar).
	SidecarBinary string
	// Dir holds the sidecars' sockets and kubeconfigs.
	Dir string
	// Namespace limits the agent to one namespace ("" = all).
	Namespace string
	// Output returns where the sidecar of pod (namespace/name) writes its log (nil: discarded).
	Output func(pod string) io.Writer
	Log    logr.Logger
}

// Agent runs injected pods' sidecars. Create it with New and call Run.
type Agent struct {
	cfg Config

	mu       sync.Mutex
	sidecars map[types.UID]*Sidecar
	changed  chan struct{} // closed and replaced whenever sidecars changes
}

// Sidecar is one running sidecar process.
type Sidecar struct {
	Pod    types.NamespacedName
	UID    types.UID
	Socket string
	// Client talks to the sidecar's API on Socket.
	Client *sidecarclient.Client
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // set before exited closes
}

// hasExited reports whether the process has exited.
func (s *Sidecar) hasExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// Signal sends sig to the sidecar process.
func (s *Sidecar) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Exited is closed when the process has exited.
func (s *Sidecar) Exited() <-chan struct{} { return s.exited }

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil || cfg.Server == nil || cfg.SidecarBinary == "" || cfg.Dir == "" {
		return nil, errors.New("nodeagent: Client, Server, SidecarBinary and Dir are required")
	}
	if cfg.Output == nil {
		cfg.Output = func(string) io.Writer { return io.Discard }
	}
	return &Agent{cfg: cfg, sidecars: map[types.UID]*Sidecar{}, changed: make(chan struct{})}, nil
}

// Run watches injected pods until ctx ends, then stops every sidecar (SIGTERM, then SIGKILL after
// 15s) and returns.
func (a *Agent) Run(ctx context.Context) error {
	selector := labels.SelectorFromSet(labels.Set{batonv1.LabelInjected: "true"}).String()
	lw := toolscache.NewFilteredListWatchFromClient(a.cfg.Client.CoreV1().RESTClient(), "pods", a.namespace(),
		func(o *metav1.ListOptions) {
			o.LabelSelector = selector
			o.FieldSelector = fields.Everything().String()
		})
	informer := toolscache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, toolscache.Indexers{})
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.sync(ctx, o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { a.sync(ctx, o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if pod, ok := o.(*corev1.Pod); ok {
				a.stop(pod.UID, syscall.SIGTERM)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("nodeagent: %w", err)
	}
	informer.Run(ctx.Done())
	a.mu.Lock()
	all := make([]types.UID, 0, len(a.sidecars))
	for uid := range a.sidecars {
		all = append(all, uid)
	}
	a.mu.Unlock()
	for _, uid := range all {
		a.stop(uid, syscall.SIGTERM)
	}
	return nil
}

func (a *Agent) namespace() string {
	if a.cfg.Namespace == "" {
		return metav1.NamespaceAll
	}
	return a.cfg.Namespace
}

// Sidecar returns the running sidecar of pod namespace/name, waiting for it until ctx ends.
func (a *Agent) Sidecar(ctx context.Context, namespace, name string) (*Sidecar, error) {
	for {
		a.mu.Lock()
		changed := a.changed
		for _, s := range a.sidecars {
			if s.Pod.Namespace == namespace && s.Pod.Name == name {
				a.mu.Unlock()
				return s, nil
			}
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nodeagent: no sidecar for pod %s/%s: %w", namespace, name, ctx.Err())
		case <-changed:
		}
	}
}

func (a *Agent) notifyLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// sync starts pod's sidecar if it has none and reports its status.
func (a *Agent) sync(ctx context.Context, pod *corev1.Pod) {
	if pod.DeletionTimestamp != nil || ctx.Err() != nil {
		return
	}
	log := a.cfg.Log.WithValues("pod", pod.Namespace+"/"+pod.Name)
	a.mu.Lock()
	s, running := a.sidecars[pod.UID]
	a.mu.Unlock()
	if !running {
		var err error
		if s, err = a.start(ctx, pod); err != nil {
			log.Error(err, "starting the sidecar")
			return
		}
		a.mu.Lock()
		a.sidecars[pod.UID] = s
		a.notifyLocked()
		a.mu.Unlock()
		log.Info("sidecar started", "socket", s.Socket)
		// Like a kubelet, notice the sidecar's death and take the pod out of traffic. It is not
		// restarted: the demo and tests use that as a node crash.
		go func() {
			<-s.exited
			if ctx.Err() == nil {
				log.Info("sidecar exited", "err", fmt.Sprint(s.err))
				if err := a.reportStatus(ctx, pod, true); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
					log.Error(err, "reporting pod status")
				}
			}
		}()
	}
	if err := a.reportStatus(ctx, pod, s.hasExited()); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		log.Error(err, "reporting pod status")
	}
}

// start runs the sidecar of pod.
func (a *Agent) start(ctx context.Context, pod *corev1.Pod) (*Sidecar, error) {
	c := sidecarContainer(pod)
	if c == nil {
		return nil, fmt.Errorf("pod has no %s container", inject.ContainerName)
	}
	env, err := resolveEnv(pod, c.Env)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(a.cfg.Dir, pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)[:8])
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, err
	}
	kubeconfig, err := a.podKubeconfig(ctx, pod, filepath.Join(base, "kubeconfig"))
	if err != nil {
		return nil, err
	}
	s := &Sidecar{Pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, UID: pod.UID,
		Socket: filepath.Join(base, "baton.sock"), exited: make(chan struct{})}
	s.Client = sidecarclient.New(s.Socket)
	// Pods here are processes on loopback addresses of one host (podIP): hints between them
	// travel on loopback, which a sidecar allows only when told so.
	env = append(env, "PATH="+os.Getenv("PATH"), sidecarcontract.Socket.Env()+"="+s.Socket,
		sidecarcontract.Kubeconfig.Env()+"="+kubeconfig, sidecarcontract.MetricsAddr.Env()+"=127.0.0.1:0",
		sidecarcontract.HintAllowLoopback.Env()+"=true")
	s.cmd = exec.Command(a.cfg.SidecarBinary, c.Args...)
	s.cmd.Env = env
	out := a.cfg.Output(pod.Namespace + "/" + pod.Name)
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("running %s: %w", a.cfg.SidecarBinary, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// stop signals the sidecar of uid and forgets it once it exited (SIGKILL after 15s).
func (a *Agent) stop(uid types.UID, sig os.Signal) {
	a.mu.Lock()
	s, ok := a.sidecars[uid]
	a.mu.Unlock()
	if !ok {
		return
	}
	s.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	a.mu.Lock()
	delete(a.sidecars, uid)
	a.notifyLocked()
	a.mu.Unlock()
}

// podKubeconfig writes a kubeconfig with a token of the pod's service account bound to the pod, as
// the kubelet's projected token is.
func (a *Agent) podKubeconfig(ctx context.Context, pod *corev1.Pod, path string) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := a.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of service account %s/%s for the sidecar: %w", pod.Namespace, sa, err)
	}
	server := &rest.Config{Host: a.cfg.Server.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: a.cfg.Server.CAData}}
	if err := localkube.WriteKubeconfig(server, path); err != nil {
		return "", err
	}
	return path, nil
}

// reportStatus writes the kubelet's part of pod's status: Running on its loopback address (podIP), every container
// running and ready, and Ready = ContainersReady and every readiness gate True. Other conditions
// (baton.dev/lock-held) are left as they are.
func (a *Agent) reportStatus(ctx context.Context, pod *corev1.Pod, sidecarExited bool) error {
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur, err := a.cfg.Client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := kubeletStatus(cur, sidecarExited)
		if statusEqual(cur.Status, want) {
			return nil
		}
		cur.Status = want
		_, err = a.cfg.Client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func sidecarContainer(pod *corev1.Pod) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == inject.ContainerName {
				return &list[i]
			}
		}
	}
	return nil
}

// resolveEnv turns the container's env into NAME=value, resolving downward-API fields.
func resolveEnv(pod *corev1.Pod, vars []corev1.EnvVar) ([]string, error) {
	out := make([]string, 0, len(vars))
	for _, e := range vars {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			if f.FieldRef == nil {
				return nil, fmt.Errorf("env %s: only downward-API fields are supported", e.Name)
			}
			switch f.FieldRef.FieldPath {
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.name":
				v = pod.Name
			case "metadata.uid":
				v = string(pod.UID)
			case "status.podIP":
				v = podIP(pod)
			default:
				return nil, fmt.Errorf("env %s: unsupported field %s", e.Name, f.FieldRef.FieldPath)
			}
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
}
