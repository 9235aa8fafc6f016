package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/localcassandra"
	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/sidecarclient"
)

// nodeCassandra listens on the node's address on the pod bridge, where pods reach it (ports apart
// from the end-to-end tests' and the other demo's).
func nodeCassandra(progress io.Writer) localcassandra.Config {
	return localcassandra.Config{Name: "demo-node", Nodes: 1, IPs: []string{localnode.HostIP},
		NativePort: 10342, StoragePort: 8350, Progress: progress}
}

// errNoNode is a node that cannot run here: the demo falls back to the node agent.
var errNoNode = errors.New("the real node is unavailable")

// runNode is the demo on the real node: the chart installed with helm, a Deployment of the demo
// app whose pods the kubelet runs with containerd and runc, and a client calling its Service
// through kube-proxy, printing who answered, while the lock changes hands three ways.
func runNode(ctx context.Context, o options, out io.Writer, logs demoLog) error {
	start := time.Now()
	fmt.Fprintf(out, "baton demo on a real node: the kubelet runs %d pods of the demo app with containerd and runc, the operator\n"+
		"injects the sidecar, and a client calls their Service through kube-proxy. Only the lock holder is Ready, so only it answers.\n"+
		"(logs: %s)\n\n", o.pods, logs.path)
	if err := localnode.CheckHost(); err != nil {
		return fmt.Errorf("%w: %v", errNoNode, err)
	}

	fmt.Fprintln(out, "setup: install Cassandra 5.0 (Maven Central), the control plane and node (kube-apiserver, kube-controller-manager,")
	fmt.Fprintln(out, "       kube-scheduler, etcd, kubelet, kube-proxy from Go modules; containerd and the CNI plugins from Go modules;")
	fmt.Fprintln(out, "       runc, iptables, conntrack with apt-get), kubectl and helm into ~/.cache/baton unless cached; then build")
	fmt.Fprintln(out, "       baton's images without Docker and start the node (a first run took 19 minutes here, later ones under a minute)")
	if _, err := localcassandra.Install(ctx, nodeCassandra(out)); err != nil {
		return fmt.Errorf("Cassandra: %w", err)
	}
	kube := localkube.Config{Progress: out}
	kubectl, err := localkube.Kubectl(ctx, kube)
	if err != nil {
		return err
	}
	helm, err := localkube.Helm(ctx, kube)
	if err != nil {
		return err
	}
	node, _, err := batonnode.Start(ctx, batonnode.StartOptions{Progress: out})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %v", errNoNode, err)
	}
	defer node.Stop()

	fmt.Fprintf(out, "setup: Cassandra on %s, where pods reach it\n", localnode.HostIP)
	cass, err := localcassandra.Start(ctx, nodeCassandra(out))
	if err != nil {
		return fmt.Errorf("Cassandra: %w", err)
	}
	defer func() { _ = cass.Stop(context.WithoutCancel(ctx)) }()

	fmt.Fprintln(out, "setup: helm install baton charts/baton (the operator as a pod from the imported image; its webhook behind a Service)")
	installed := time.Now()
	if helmOut, err := batonnode.Install(ctx, batonnode.Chart{Helm: helm, Dir: "charts/baton", Node: node, Hosts: cass.Hosts()}); err != nil {
		return fmt.Errorf("%w\n%s", err, helmOut)
	}
	fmt.Fprintf(out, "setup: operator Ready %s after helm install began\n", time.Since(installed).Round(100*time.Millisecond))

	c, err := newClient(node, logs.log.WithName("client"))
	if err != nil {
		return err
	}
	d := &nodeDemo{out: out, c: c, node: node, kubectl: kubectl, start: time.Now()}
	if err := d.script(ctx, o); err != nil {
		return err
	}
	fmt.Fprintf(out, "\ndemo done in %s (setup included)\n", time.Since(start).Round(time.Second))
	if o.keep {
		fmt.Fprintf(out, "\nstill running; try: KUBECONFIG=%s %s get pods,dlock -n %s   (Ctrl-C to stop)\n", node.Kubeconfig, kubectl, namespace)
		<-ctx.Done()
	}
	return nil
}

// newClient returns a client of the node's API server that logs to log.
func newClient(node *localnode.Node, log logr.Logger) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), batonv1.AddToScheme(scheme)); err != nil {
		return nil, err
	}
	return client.New(node.Config, client.Options{Scheme: scheme, Log: log})
}

type nodeDemo struct {
	out     io.Writer
	c       client.Client
	node    *localnode.Node
	kubectl string
	start   time.Time

	mu   sync.Mutex // the poller's callback prints beside the script
	last string     // the last answer printed, to print changes only
}

// step is one change of hands as the client saw it.
type step struct {
	what, action  string
	from, to      demoapp.Status
	gap           time.Duration // last answer of the old grant to the first of the new
	failed        int           // requests that got no answer in between
	sinceStimulus time.Duration // from the action to the first answer of the new grant
}

func (d *nodeDemo) script(ctx context.Context, o options) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := d.c.Create(ctx, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	w := batonnode.Workload{Namespace: namespace, Name: lockName, Replicas: int32(o.pods), Mode: batonv1.ModeBlocking,
		Policy: batonv1.TrafficReadinessGate, Lease: o.lease}
	dl, dep, svc := w.Objects()
	for _, obj := range []client.Object{dl, dep, svc} {
		if err := d.c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
		}
	}
	fmt.Fprintf(d.out, "setup: DistributedLock %s/%s (lease %v, Blocking, traffic to the holder only: ReadinessGate), a Deployment of %d\n"+
		"       demo app pods annotated with it, and the Service %s at %s\n", namespace, lockName, o.lease, o.pods, svc.Name, svc.Spec.ClusterIP)

	holder, err := d.waitForOneReady(ctx, o.pods)
	if err != nil {
		return err
	}
	d.kubectlRun(ctx, "get", "pods", "-n", namespace, "-o", "custom-columns=POD:.metadata.name,IP:.status.podIP,"+
		"READY:.status.conditions[?(@.type=='Ready')].status,LOCK-HELD:.status.conditions[?(@.type=='"+batonv1.ConditionLockHeld+"')].status,"+
		"SIDECAR-STARTED:.status.initContainerStatuses[?(@.name=='"+inject.ContainerName+"')].started,"+
		"APP-STARTED:.status.containerStatuses[?(@.name=='app')].started")
	url := "http://" + svc.Spec.ClusterIP + "/"
	fmt.Fprintf(d.out, "\nclient: GET %s every 100ms, each on a new connection (kube-proxy picks a pod per connection); a line per change:\n", url)
	answers := demoapp.Poll(ctx, url, 100*time.Millisecond, d.print)
	defer answers.Stop()
	first, err := d.awaitAnswer(ctx, answers, 0, "an answer from the holder", func(a demoapp.Answer) bool {
		return a.Err == nil && a.Status.State == sidecarclient.StateHeld
	})
	if err != nil {
		return err
	}
	if first.Status.Pod != holder {
		return fmt.Errorf("the Service answered from %s, but the Ready pod is %s", first.Status.Pod, holder)
	}
	var steps []step

	fmt.Fprintf(d.out, "\n1. delete the holder pod %s: its sidecar releases the lock at SIGTERM, after the app stopped\n", first.Status.Pod)
	s, err := d.change(ctx, answers, "graceful delete", "delete", first.Status, func() error {
		return d.c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: first.Status.Pod}})
	}, func(a demoapp.Answer) bool { return a.Status.Pod != first.Status.Pod })
	if err != nil {
		return err
	}
	steps = append(steps, s)

	cur := s.to
	fmt.Fprintf(d.out, "\n2. kill %s's sidecar container with SIGKILL (a crash): the kubelet restarts it in the same pod, which may\n"+
		"   take the lock straight back (same pod: no wait for the lease), with a larger token\n", cur.Pod)
	s, err = d.change(ctx, answers, "killed sidecar", "kill", cur, func() error {
		var pod corev1.Pod
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cur.Pod}, &pod); err != nil {
			return err
		}
		for _, st := range pod.Status.InitContainerStatuses {
			if st.Name == inject.ContainerName {
				return d.node.KillContainer(ctx, st.ContainerID)
			}
		}
		return fmt.Errorf("pod %s has no %s container", cur.Pod, inject.ContainerName)
	}, func(a demoapp.Answer) bool { return a.Status.Token > cur.Token })
	if err != nil {
		return err
	}
	steps = append(steps, s)

	cur = s.to
	revoke := fmt.Sprintf("%s=%s=%d", batonv1.AnnotationRevoke, lockName, cur.Token)
	fmt.Fprintf(d.out, "\n3. revoke %s's grant (token %d): the operator revokes it in Cassandra, the holder fences itself at its next\n"+
		"   renewal, the next in the queue takes over after one lease\n", cur.Pod, cur.Token)
	s, err = d.change(ctx, answers, "revocation", "annotation", cur, func() error {
		d.kubectlRun(ctx, "annotate", "distributedlock", lockName, "-n", namespace, revoke)
		return nil
	}, func(a demoapp.Answer) bool { return a.Status.Token > cur.Token })
	if err != nil {
		return err
	}
	steps = append(steps, s)
	all := answers.Stop()

	fmt.Fprintln(d.out)
	d.kubectlRun(ctx, "get", "distributedlocks", "-n", namespace, "-o", "wide")
	d.kubectlRun(ctx, "get", "events.v1.events.k8s.io", "-n", namespace, "--field-selector", "regarding.kind=DistributedLock",
		"--sort-by=.metadata.creationTimestamp", "-o", "custom-columns=REASON:.reason,NOTE:.note")

	fmt.Fprintf(d.out, "\nsummary (lease %v; %d requests through the Service):\n", o.lease, len(all))
	for i, s := range steps {
		fmt.Fprintf(d.out, "  %d. %s: %s (token %d) -> %s (token %d)\n", i+1, s.what, s.from.Pod, s.from.Token, s.to.Pod, s.to.Token)
		fmt.Fprintf(d.out, "     traffic failover %v (last held answer of the old grant to the first of the new; %d requests not served\n"+
			"     in between); the first answer of the new grant came %v after the %s\n",
			s.gap.Round(time.Millisecond), s.failed, s.sinceStimulus.Round(time.Millisecond), s.action)
	}
	counts := map[string]int{}
	var order []string
	for _, a := range all {
		key := "no answer"
		switch {
		case a.Err != nil:
		case a.Status.State == sidecarclient.StateHeld:
			key = a.Status.Pod + " held"
		default:
			key = a.Status.Pod + " not serving"
		}
		if counts[key] == 0 {
			order = append(order, key)
		}
		counts[key]++
	}
	fmt.Fprint(d.out, "  answers:")
	for i, k := range order {
		sep := ","
		if i == len(order)-1 {
			sep = "\n"
		}
		fmt.Fprintf(d.out, " %s %d%s", k, counts[k], sep)
	}
	if err := checkAnswers(all); err != nil {
		return err
	}
	fmt.Fprintln(d.out, "  checked: every held answer came from one pod per token, and the tokens never went down")
	return nil
}

// checkAnswers checks what the client saw against the lock's promises: a fencing token is held
// by one pod only, and once a pod has answered held with a token, no pod answers held with an
// older one (the client's requests are sequential: each is sent after the last was answered).
func checkAnswers(all []demoapp.Answer) error {
	owner := map[int64]string{}
	var top int64
	for _, a := range all {
		if a.Err != nil || a.Status.State != sidecarclient.StateHeld {
			continue
		}
		if p, ok := owner[a.Status.Token]; ok && p != a.Status.Pod {
			return fmt.Errorf("token %d answered held by both %s and %s", a.Status.Token, p, a.Status.Pod)
		}
		owner[a.Status.Token] = a.Status.Pod
		if a.Status.Token < top {
			return fmt.Errorf("%s answered held with token %d after token %d had answered", a.Status.Pod, a.Status.Token, top)
		}
		top = a.Status.Token
	}
	return nil
}

// change runs act and waits for the first answer after it that isNew says comes from the next
// grant (held), then measures the traffic failover.
func (d *nodeDemo) change(ctx context.Context, answers *demoapp.Poller, what, action string, from demoapp.Status, act func() error,
	isNew func(demoapp.Answer) bool) (step, error) {
	mark := len(answers.Since(0))
	acted := time.Now()
	if err := act(); err != nil {
		return step{}, err
	}
	next, err := d.awaitAnswer(ctx, answers, mark, "an answer from the next grant", func(a demoapp.Answer) bool {
		return a.Err == nil && a.Status.State == sidecarclient.StateHeld && isNew(a)
	})
	if err != nil {
		return step{}, err
	}
	var lastOld time.Time
	failed := 0
	for _, a := range answers.Since(0) {
		if !a.At.Before(next.At) {
			break
		}
		switch {
		case a.Err == nil && a.Status.Pod == from.Pod && a.Status.Token == from.Token:
			lastOld, failed = a.At, 0
		default:
			failed++
		}
	}
	return step{what: what, action: action, from: from, to: next.Status, gap: next.At.Sub(lastOld), failed: failed, sinceStimulus: next.At.Sub(acted)}, nil
}

// awaitAnswer waits (at most two minutes) for an answer from the i-th on that ok accepts.
func (d *nodeDemo) awaitAnswer(ctx context.Context, answers *demoapp.Poller, i int, what string, ok func(demoapp.Answer) bool) (demoapp.Answer, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, a := range answers.Since(i) {
			if ok(a) {
				return a, nil
			}
		}
		if time.Now().After(deadline) {
			return demoapp.Answer{}, fmt.Errorf("no %s within two minutes (logs: %s)", what, d.node.Dir)
		}
		select {
		case <-ctx.Done():
			return demoapp.Answer{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// print prints an answer when it differs from the last one printed.
func (d *nodeDemo) print(a demoapp.Answer) {
	line := "no answer"
	if a.Err == nil {
		line = "answer from " + a.Status.Pod + ": " + describe(a.Status)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if line != d.last {
		fmt.Fprintf(d.out, "  %7.2fs  %s\n", a.At.Sub(d.start).Seconds(), line)
		d.last = line
	}
}

// describe says what an answer says of the lock.
func describe(st demoapp.Status) string {
	switch {
	case st.State == sidecarclient.StateHeld:
		return fmt.Sprintf("held, token %d", st.Token)
	case st.State != "":
		return string(st.State) + ", not serving"
	default:
		return "sidecar unreachable, not serving"
	}
}

// waitForOneReady waits (at most three minutes) until the Deployment's pods exist and exactly
// one is Ready, printing how many run and are Ready as it changes; it returns the Ready pod.
func (d *nodeDemo) waitForOneReady(ctx context.Context, replicas int) (string, error) {
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for {
		var pods corev1.PodList
		if err := d.c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{"app": lockName}); err != nil {
			return "", err
		}
		var running, ready []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			// A standby's app container waits for the lock (Blocking mode), so the pod stays
			// Pending while its sidecar runs: count running sidecars.
			for _, c := range p.Status.InitContainerStatuses {
				if c.Name == inject.ContainerName && c.State.Running != nil {
					running = append(running, p.Name)
				}
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = append(ready, p.Name)
				}
			}
		}
		holders := strings.Join(ready, ", ")
		if holders == "" {
			holders = "none yet"
		}
		line := fmt.Sprintf("%d of %d pods have their sidecar running; Ready (holding the lock): %s", len(running), replicas, holders)
		if line != last {
			fmt.Fprintf(d.out, "  %7.2fs  %s\n", time.Since(d.start).Seconds(), line)
			last = line
		}
		if len(running) == replicas && len(ready) == 1 {
			return ready[0], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("not exactly one of %d pods Ready within three minutes (logs: %s)", replicas, d.node.Dir)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// kubectlRun runs the real kubectl against the node's API server and prints the command and its
// output.
func (d *nodeDemo) kubectlRun(ctx context.Context, args ...string) {
	runKubectl(ctx, d.out, d.kubectl, d.node.Kubeconfig, args...)
}
