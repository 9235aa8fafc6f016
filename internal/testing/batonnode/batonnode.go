// Package batonnode is baton on the real node (internal/testing/localnode) as users run it, shared by the
// end-to-end tests and make demo: the node started with baton's images imported, the chart
// installed with helm, and the workload the user guide recommends (a DistributedLock, an annotated
// Deployment of the demo app and its Service).
package batonnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/localnode"
)

// StartOptions bound and report starting a node.
type StartOptions struct {
	// Progress receives a line per step (install, image build, start); nil discards them.
	Progress io.Writer
	// InstallTimeout bounds installing and building (cache hits normally); StartTimeout bounds
	// starting the installed node (about 15 seconds here). Zero means 45 and 3 minutes.
	InstallTimeout, StartTimeout time.Duration
	// Nodes is how many nodes the cluster has (localnode.Options.Nodes; 0: one).
	Nodes int
}

// Start installs what the node runs (normally cache hits), builds baton's images and starts the
// node with them imported, each step with a bound of its own. It fails at once, saying what is
// missing, on a machine that cannot run a node (localnode.CheckHost).
func Start(ctx context.Context, o StartOptions) (*localnode.Node, imagebuild.Result, error) {
	if err := localnode.CheckHost(); err != nil {
		return nil, imagebuild.Result{}, err
	}
	progress := o.Progress
	if progress == nil {
		progress = io.Discard
	}
	installTimeout, startTimeout := o.InstallTimeout, o.StartTimeout
	if installTimeout <= 0 {
		installTimeout = 45 * time.Minute
	}
	if startTimeout <= 0 {
		startTimeout = 3 * time.Minute
	}
	ictx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	kubeBin, err := localkube.Install(ictx, localkube.Config{Progress: progress})
	if err != nil {
		return nil, imagebuild.Result{}, fmt.Errorf("control plane not built: %w", err)
	}
	bins, err := localnode.Install(ictx, localnode.Config{Progress: progress})
	if err != nil {
		return nil, imagebuild.Result{}, fmt.Errorf("node not installed: %w", err)
	}
	imagesDir, err := os.MkdirTemp("", "baton-images-")
	if err != nil {
		return nil, imagebuild.Result{}, err
	}
	defer os.RemoveAll(imagesDir) // imported, or of no use
	images, err := imagebuild.BuildAll(ictx, imagesDir, imagebuild.WithProgress(progress))
	if err != nil {
		return nil, imagebuild.Result{}, fmt.Errorf("images not built: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	node, err := localnode.Start(sctx, localnode.Options{
		Components: localnode.ComponentsOf(kubeBin, bins),
		PauseImage: imagebuild.PauseTag,
		Images:     []string{images.Archive},
		Progress:   progress,
		Nodes:      o.Nodes,
	})
	if err != nil {
		return nil, imagebuild.Result{}, fmt.Errorf("did not start: %w", err)
	}
	return node, images, nil
}

// Chart says how to install charts/baton.
type Chart struct {
	Helm  string // the helm binary (localkube.Helm)
	Dir   string // the chart's directory, charts/baton, or a packaged chart (.tgz)
	Node  *localnode.Node
	Hosts []string // the operator's default Cassandra contact points, reachable from pods
	// AllowedHosts is the chart's cassandra.allowedHosts: the contact points a DistributedLock may
	// name (empty: Hosts only).
	AllowedHosts []string
	// GlobalNamespaces may use scope: Global locks.
	GlobalNamespaces []string
	// MetricsPort is the chart's sidecar.metricsPort: the port on each pod's IP where sidecars
	// serve their metrics (0: the chart's default, loopback only).
	MetricsPort int32
	// Timeout bounds the install, waiting for the operator to be Ready (default 3 minutes).
	Timeout time.Duration
	// ChartImage runs the image the chart names by default (image.repository, tag v<appVersion>),
	// as a released chart does with its image archive imported; false runs imagebuild.BatonTag.
	// Either way the image is never pulled.
	ChartImage bool
	// NodeSelector is the chart's nodeSelector for the operator's pod, e.g. the node that is never
	// powered off: {localnode.NodeRoleLabel: localnode.RoleSystem}. Empty: any node.
	NodeSelector map[string]string
}

// Install runs helm install of the chart into baton-system, as the user guide says, with the image
// imported into the node (never pulled) and one operator replica, and waits until the operator is
// Ready (its webhook serving through its Service). It returns helm's output.
func Install(ctx context.Context, c Chart) ([]byte, error) {
	if c.Helm == "" || c.Dir == "" || c.Node == nil || len(c.Hosts) == 0 {
		return nil, errors.New("batonnode: Helm, Dir, Node and Hosts are required")
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	args := []string{"install", "baton", c.Dir,
		"--kubeconfig", c.Node.Kubeconfig, "--namespace", "baton-system", "--create-namespace",
		"--set", "image.pullPolicy=Never", "--set", "sidecar.image.pullPolicy=Never", "--set", "replicas=1",
		"--set", "cassandra.hosts={" + strings.Join(c.Hosts, ",") + "}",
		// The local Cassandra runs without authentication, on one node.
		"--set", "cassandra.allowAnonymous=true",
		"--set-json", `cassandra.schemaReplication="{'class': 'SimpleStrategy', 'replication_factor': 1}"`,
		"--set", "cassandra.allowSingleReplica=true",
		"--wait", "--timeout", timeout.String()}
	if !c.ChartImage {
		repo, tag, _ := strings.Cut(imagebuild.BatonTag, ":")
		args = append(args, "--set", "image.repository="+repo, "--set", "image.tag="+tag)
	}
	if len(c.GlobalNamespaces) > 0 {
		args = append(args, "--set", "globalNamespaces={"+strings.Join(c.GlobalNamespaces, ",")+"}")
	}
	if len(c.AllowedHosts) > 0 {
		args = append(args, "--set", "cassandra.allowedHosts={"+strings.Join(c.AllowedHosts, ",")+"}")
	}
	if c.MetricsPort != 0 {
		args = append(args, "--set", fmt.Sprintf("sidecar.metricsPort=%d", c.MetricsPort))
	}
	if len(c.NodeSelector) > 0 {
		sel, err := json.Marshal(c.NodeSelector)
		if err != nil {
			return nil, fmt.Errorf("batonnode: node selector: %w", err)
		}
		args = append(args, "--set-json", "nodeSelector="+string(sel))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Helm, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("helm install %s: %w", filepath.Base(c.Dir), err)
	}
	return out, nil
}

// Workload describes the demo app deployed the way the user guide recommends.
type Workload struct {
	Namespace string
	Name      string // of the DistributedLock, its lock ID, the Deployment and the Service
	Replicas  int32
	Mode      batonv1.LockMode
	Policy    batonv1.TrafficPolicy
	Lease     time.Duration
	// YieldWhenUnready, when set, binds the lock to the app's health (spec.yieldWhenUnready) and
	// gives the app a readiness probe on its GET /readyz, every second.
	YieldWhenUnready time.Duration
	// Handoff is spec.handoff (empty: QueueOrder).
	Handoff batonv1.HandoffPolicy
	// Contend makes the demo app ask for the lock and ask again when it stops holding it (for
	// mode Try; demoapp.EnvContend).
	Contend bool
	// Spread puts each pod on a node of its own (the affinity Spread returns): at most as many
	// replicas run as the cluster has nodes; the others stay Pending.
	Spread bool
}

// Spread is the affinity that keeps pods with labels off a node that already runs one: a required
// anti-affinity on the node's host name, as a real cluster spreads the replicas of a workload
// that must survive a node's loss.
func Spread(labels map[string]string) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
			TopologyKey:   corev1.LabelHostname,
		}},
	}}
}

// Objects returns the workload's DistributedLock; the Deployment of the demo app annotated with
// it (pulled never, the lock ID in its environment, maxUnavailable 100% as the user guide's rollout
// settings say); and a Service in front of it on port 80.
func (w Workload) Objects() (*batonv1.DistributedLock, *appsv1.Deployment, *corev1.Service) {
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: batonv1.DistributedLockSpec{
			LockIDs: []string{w.Name}, Mode: w.Mode, TrafficPolicy: w.Policy,
			LeaseDuration: &metav1.Duration{Duration: w.Lease},
			Handoff:       w.Handoff,
		},
	}
	var probe *corev1.Probe
	if w.YieldWhenUnready > 0 {
		dl.Spec.YieldWhenUnready = &metav1.Duration{Duration: w.YieldWhenUnready}
		probe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
	}
	env := []corev1.EnvVar{{Name: demoapp.EnvLockID, Value: w.Name}}
	if w.Contend {
		env = append(env, corev1.EnvVar{Name: demoapp.EnvContend, Value: "true"})
	}
	labels := map[string]string{"app": w.Name}
	var affinity *corev1.Affinity
	if w.Spread {
		affinity = Spread(labels)
	}
	all := intstr.FromString("100%")
	replicas := w.Replicas
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &all}},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{batonv1.AnnotationLock: w.Name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: imagebuild.DemoAppTag, ImagePullPolicy: corev1.PullNever,
					Env:            env,
					Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: probe,
				}}, Affinity: affinity},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	return dl, dep, svc
}
