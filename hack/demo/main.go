// Command demo shows baton end to end on one machine. On a machine that can run one (root, runc,
// bridge netfilter, overlayfs), it starts a real node: a local control plane, the kubelet with
// containerd and runc, kube-proxy, a local Cassandra on the pod network, and baton's chart
// installed with helm. A Deployment of the demo app shares one lock with the ReadinessGate policy,
// and a client calls its Service, printing which pod answered, while the lock changes hands three
// ways:
//
//  1. the holder pod is deleted: its sidecar releases the lock at SIGTERM (graceful handoff);
//
//  2. the holder's sidecar container is killed with SIGKILL: the kubelet restarts it;
//
//  3. the holder is revoked with the baton.dev/revoke annotation.
//
// Elsewhere (or with -node-agent) it says why and runs the same story with a node agent in place
// of the kubelet: the sidecars run as processes, and pod readiness is computed by the agent.
//
//	go run ./hack/demo [-pods N] [-lease 5s] [-keep] [-node-agent]
//
// With -keep it stays up after the script and prints a KUBECONFIG for kubectl until Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/testing/devcluster"
	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/nodeagent"
)

const (
	namespace = "demo"
	lockName  = "nightly-report"
)

type options struct {
	pods      int
	lease     time.Duration
	keep      bool
	nodeAgent bool
}

func main() {
	var o options
	flag.IntVar(&o.pods, "pods", 0, "pods sharing the lock, 3-10 (default 3 on the real node, 4 with the node agent)")
	flag.DurationVar(&o.lease, "lease", 5*time.Second, "lease duration (1s-1m)")
	flag.BoolVar(&o.keep, "keep", false, "keep everything running after the script, until Ctrl-C")
	flag.BoolVar(&o.nodeAgent, "node-agent", false, "run the pods' sidecars with the node agent instead of a real node")
	flag.Parse()
	if (o.pods != 0 && (o.pods < 3 || o.pods > 10)) || o.lease < time.Second || o.lease > time.Minute || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "demo: -pods must be 3 to 10 and -lease 1s to 1m; no arguments")
		os.Exit(2)
	}
	logs, err := openLog(filepath.Join(os.TempDir(), "baton-demo.log"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
	routeLibraryLogs(logs.log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o, os.Stdout, logs)
	stop()
	_ = logs.file.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

// demoLog is where the demo's components log: one JSON object a line in a file, apart from the
// story on stdout.
type demoLog struct {
	log  logr.Logger
	file *os.File
	path string
}

// openLog creates (or truncates) the log file at path and a logger writing to it. The file is
// not synced: a crash may lose its last lines.
func openLog(path string) (demoLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return demoLog{}, fmt.Errorf("demo log: %w", err)
	}
	log := funcr.NewJSON(func(s string) { fmt.Fprintln(f, s) }, funcr.Options{LogTimestamp: true}) // one write a line
	return demoLog{log: log, file: f, path: path}, nil
}

// routeLibraryLogs points the package-level loggers of controller-runtime and client-go (klog) at
// log. Without it controller-runtime prints a goroutine dump to stderr ("log.SetLogger(...) was
// never called") when its client is first made 30 s or more after the process started, and
// client-go prints its warnings to stderr, in the middle of the demo's story. Called once, from
// main, as cmd/operator does; it changes process-wide state.
func routeLibraryLogs(log logr.Logger) {
	ctrl.SetLogger(log)
	klog.SetLogger(log)
}

// run runs the demo on the real node, or with the node agent when asked to or when this machine
// cannot run a node.
func run(ctx context.Context, o options, out io.Writer, logs demoLog) error {
	if !o.nodeAgent {
		node := o
		if node.pods == 0 {
			node.pods = 3
		}
		err := runNode(ctx, node, out, logs)
		if !errors.Is(err, errNoNode) {
			return err
		}
		fmt.Fprintf(out, "\n%v\nrunning the demo with the node agent instead (sidecars as processes, no kubelet)\n\n", err)
	}
	if o.pods == 0 {
		o.pods = 4
	}
	return runAgent(ctx, o, out, logs)
}

// runAgent is the demo with the node agent in place of the kubelet.
func runAgent(ctx context.Context, o options, out io.Writer, logs demoLog) error {
	log, logFile := logs.log, logs.file
	fmt.Fprintf(out, "baton demo: %d pods share one lock through the operator and its sidecars (logs: %s)\n\n", o.pods, logs.path)

	// Everything is installed before anything starts, each step reporting whether it reused the
	// cache and how long it took.
	fmt.Fprintln(out, "setup: install Cassandra 5.0 (Maven Central), kube-apiserver, kube-controller-manager, etcd and kubectl (Go modules) into ~/.cache/baton unless cached")
	node := localcassandra.Demo()
	node.Progress = out
	kube := localkube.Config{Progress: out}
	if _, err := localcassandra.Install(ctx, node); err != nil {
		return fmt.Errorf("Cassandra: %w", err)
	}
	if _, err := localkube.Install(ctx, kube); err != nil {
		return err
	}
	kubectl, err := localkube.Kubectl(ctx, kube)
	if err != nil {
		return err
	}
	binDir, err := os.MkdirTemp("", "baton-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	sidecar := filepath.Join(binDir, "sidecar")
	fmt.Fprintln(out, "setup: building the sidecar (go build prints nothing until it is done)...")
	built := time.Now()
	if err := devcluster.BuildSidecar(ctx, ".", sidecar); err != nil {
		return err
	}
	fmt.Fprintf(out, "setup: sidecar built in %s\n", time.Since(built).Round(time.Second))

	fmt.Fprintln(out, "setup: Cassandra 5.0, or the one make cassandra-start runs")
	hosts, stopCassandra, err := localcassandra.RunningOrStart(ctx, node)
	if err != nil {
		return fmt.Errorf("Cassandra: %w", err)
	}
	defer stopCassandra()

	fmt.Fprintln(out, "setup: control plane: kube-apiserver and etcd")
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("config", "crd", "bases")}, ErrorIfCRDPathMissing: true}
	cfg, err := localkube.StartEnv(ctx, kube, env)
	if err != nil {
		return err
	}
	defer env.Stop()

	fmt.Fprintln(out, "setup: operator (webhook with its own certificate, status reconciler, sidecar RBAC) and a node agent for the pods")
	cl, err := devcluster.Start(ctx, devcluster.Options{
		Server: cfg, RepoRoot: ".", CassandraHosts: hosts, Keyspace: "baton_demo", Log: log, SidecarBinary: sidecar,
		OperatorArgs:  []string{"--status-interval=1s"},
		SidecarOutput: nodeagent.PrefixLines(logFile, "sidecar "),
	})
	if err != nil {
		return err
	}
	defer cl.Stop()
	d := &demo{out: out, c: cl.Client, cl: cl, kubectl: kubectl, start: time.Now(), lease: o.lease}
	return d.script(ctx, o)
}

type demo struct {
	out     io.Writer
	c       client.Client
	cl      *devcluster.Cluster
	kubectl string
	start   time.Time
	lease   time.Duration
	last    string // last timeline line, to print changes only
}

func (d *demo) script(ctx context.Context, o options) error {
	if err := d.cl.CreateNamespace(ctx, namespace); err != nil {
		return err
	}
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: lockName},
		Spec: batonv1.DistributedLockSpec{LockIDs: []string{lockName}, LeaseDuration: &metav1.Duration{Duration: o.lease},
			TrafficPolicy: batonv1.TrafficReadinessGate},
	}
	if err := d.c.Create(ctx, dl); err != nil {
		return fmt.Errorf("creating the DistributedLock: %w", err)
	}
	fmt.Fprintf(d.out, "setup: DistributedLock %s/%s: lock ID %q, lease %v, traffic to the holder only (ReadinessGate)\n", namespace, lockName, lockName, o.lease)
	var names []string
	for i := 1; i <= o.pods; i++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: fmt.Sprintf("report-%d", i),
				Annotations: map[string]string{batonv1.AnnotationLock: lockName}},
			Spec: corev1.PodSpec{ServiceAccountName: devcluster.AppAccount,
				Containers: []corev1.Container{{Name: "app", Image: "example.com/report-writer:1"}}},
		}
		if err := d.c.Create(ctx, pod); err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		names = append(names, pod.Name)
		// One at a time, so the queue order is the creation order.
		if _, err := d.waitFor(ctx, func(s batonv1.LockStatus) bool { return s.Holder != "" && int(s.Waiting) >= i-1 }); err != nil {
			return err
		}
	}
	fmt.Fprintf(d.out, "setup: pods %s created; the webhook injected the baton sidecar into each\n\n", strings.Join(names, ", "))
	d.kubectlRun(ctx, "get", "distributedlocks", "-n", namespace)
	d.kubectlRun(ctx, "get", "pods", "-n", namespace, "-o", "custom-columns=POD:.metadata.name,READY:.status.conditions[?(@.type=='Ready')].status,LOCK-HELD:.status.conditions[?(@.type=='"+batonv1.ConditionLockHeld+"')].status")

	holder, err := d.current(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "\n1. delete the holder pod %s: its sidecar releases the lock at SIGTERM\n", holder.Holder)
	t0 := time.Now()
	if err := d.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: holder.Holder}}); err != nil {
		return err
	}
	next, err := d.waitFor(ctx, func(s batonv1.LockStatus) bool { return s.Holder != "" && s.Holder != holder.Holder })
	if err != nil {
		return err
	}
	graceful := time.Since(t0)

	fmt.Fprintf(d.out, "\n2. kill %s's sidecar with SIGKILL and never restart it (a node crash): the lease must run out\n", next.Holder)
	sc, err := d.cl.Agent.Sidecar(ctx, namespace, next.Holder)
	if err != nil {
		return err
	}
	t0 = time.Now()
	if err := sc.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	third, err := d.waitFor(ctx, func(s batonv1.LockStatus) bool { return s.Holder != "" && s.Holder != next.Holder })
	if err != nil {
		return err
	}
	crash := time.Since(t0)

	// The revocation names the grant by its token, so it can only ever hit that grant.
	revoke := fmt.Sprintf("%s=%s=%d", batonv1.AnnotationRevoke, lockName, third.Token)
	fmt.Fprintf(d.out, "\n3. revoke %s's grant: kubectl annotate distributedlock %s %s\n", third.Holder, lockName, revoke)
	t0 = time.Now()
	d.kubectlRun(ctx, "annotate", "distributedlock", lockName, "-n", namespace, revoke)
	fourth, err := d.waitFor(ctx, func(s batonv1.LockStatus) bool { return s.Token > third.Token })
	if err != nil {
		return err
	}
	revoked := time.Since(t0)

	fmt.Fprintln(d.out)
	d.kubectlRun(ctx, "get", "distributedlocks", "-n", namespace, "-o", "wide")
	d.kubectlRun(ctx, "get", "events.v1.events.k8s.io", "-n", namespace, "--sort-by=.metadata.creationTimestamp",
		"-o", "custom-columns=OBJECT:.regarding.name,REASON:.reason,NOTE:.note")
	fmt.Fprintf(d.out, "\nsummary (lease %v; times as seen in the DistributedLock's status, which the operator refreshes on pod changes and every second):\n", o.lease)
	fmt.Fprintf(d.out, "  graceful handoff %s -> %s: %v\n", holder.Holder, next.Holder, graceful.Round(time.Millisecond))
	fmt.Fprintf(d.out, "  crash failover   %s -> %s: %v (about one lease: the waiter must see the record unchanged for a full lease)\n", next.Holder, third.Holder, crash.Round(time.Millisecond))
	fmt.Fprintf(d.out, "  revocation       %s -> %s: %v (the revoked holder fences itself at its next renewal; the next grant waits one lease)\n", third.Holder, fourth.Holder, revoked.Round(time.Millisecond))
	fmt.Fprintf(d.out, "  fencing tokens: %d, %d, %d, %d: every grant's token is larger than all before it\n", holder.Token, next.Token, third.Token, fourth.Token)

	if o.keep {
		fmt.Fprintf(d.out, "\nstill running; try: KUBECONFIG=%s %s get dlock -A   (Ctrl-C to stop)\n", d.cl.Kubeconfig, d.kubectl)
		<-ctx.Done()
	}
	return nil
}

// current returns the lock's status now.
func (d *demo) current(ctx context.Context) (batonv1.LockStatus, error) {
	return d.waitFor(ctx, func(s batonv1.LockStatus) bool { return s.Holder != "" })
}

// waitFor polls the DistributedLock's status, printing each change of holder, token or waiters
// with which pods are Ready, until ok holds (at most a minute).
func (d *demo) waitFor(ctx context.Context, ok func(batonv1.LockStatus) bool) (batonv1.LockStatus, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var dl batonv1.DistributedLock
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: lockName}, &dl); err != nil {
			return batonv1.LockStatus{}, err
		}
		if len(dl.Status.Locks) > 0 {
			s := dl.Status.Locks[0]
			d.timeline(ctx, s)
			if ok(s) {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			return batonv1.LockStatus{}, errors.New("the lock did not reach the expected state within a minute (see the log)")
		}
		select {
		case <-ctx.Done():
			return batonv1.LockStatus{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *demo) timeline(ctx context.Context, s batonv1.LockStatus) {
	var pods corev1.PodList
	var ready []string
	if err := d.c.List(ctx, &pods, client.InNamespace(namespace)); err == nil {
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
					ready = append(ready, p.Name)
				}
			}
		}
	}
	holder := s.Holder
	if holder == "" {
		holder = "(none)"
	}
	line := fmt.Sprintf("holder %-9s token %-3d waiting %d   Ready pods: %s", holder, s.Token, s.Waiting, strings.Join(ready, ", "))
	if s.LastRevocation != nil {
		line += fmt.Sprintf("   (revoked token %d)", s.LastRevocation.Token)
	}
	if line != d.last {
		fmt.Fprintf(d.out, "  %7.2fs  %s\n", time.Since(d.start).Seconds(), line)
		d.last = line
	}
}

// kubectlRun runs the real kubectl against the local control plane and prints the command and
// its output.
func (d *demo) kubectlRun(ctx context.Context, args ...string) {
	runKubectl(ctx, d.out, d.kubectl, d.cl.Kubeconfig, args...)
}

// runKubectl runs kubectl with kubeconfig and prints the command and its output to out; a
// failure is printed, not returned: the demo shows it and goes on.
func runKubectl(ctx context.Context, out io.Writer, kubectl, kubeconfig string, args ...string) {
	fmt.Fprintf(out, "\n$ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(out, "(kubectl: %v)\n", err)
	}
}
