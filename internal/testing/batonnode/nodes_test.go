package batonnode_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestServiceAcrossTwoNodes: a cluster of two sandboxed nodes (issue 27, increment 2), each with
// its role label; a Deployment of the demo app (no sidecar: it answers 503 with its pod name)
// spread with batonnode.Spread runs one pod on each node, each with an address from its own node's
// pod subnet; the host reaches each pod directly (its route through the pod's node) and both
// through the Service's cluster IP, which node 1's kube-proxy translates, for the pod on node 2
// across the nodes' link. After Stop, localnode.Leftovers is empty.
//
// From inside the pod on node 2 (localnode's PodDialer), the pod on node 1 answers directly, the
// Service answers, and the API server accepts a connection through the kubernetes Service.
func TestServiceAcrossTwoNodes(t *testing.T) {
	testenv.SkipShort(t, "two real nodes (kubelets, containerds, kube-proxies)")
	if err := localnode.CheckHost(); err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	start := time.Now()
	n, _, err := batonnode.Start(t.Context(), batonnode.StartOptions{
		Progress: os.Stderr, InstallTimeout: testenv.InstallTimeout, StartTimeout: 3 * time.Minute, Nodes: 2})
	if err != nil {
		if testenv.InCI() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			n.Stop()
		}
	}
	defer stop()
	if len(n.Missing) > 0 {
		msg := fmt.Sprintf("the second node did not start: %s", strings.Join(n.Missing, "; "))
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Logf("two nodes Ready %s after Start began (images built and imported included)", time.Since(start).Round(100*time.Millisecond))
	specs := n.Specs()
	client, err := kubernetes.NewForConfig(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, s := range specs {
		node, err := client.CoreV1().Nodes().Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Labels[localnode.NodeRoleLabel]; got != s.Role || got == "" {
			t.Errorf("node %s labelled %s=%q, want %q", s.Name, localnode.NodeRoleLabel, got, s.Role)
		}
	}

	labels := map[string]string{"app": "spread"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(len(specs))),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "demo", Image: imagebuild.DemoAppTag, ImagePullPolicy: corev1.PullNever,
						Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
					Affinity:                      batonnode.Spread(labels),
					TerminationGracePeriodSeconds: new(int64),
				},
			},
		},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var pods []corev1.Pod
	took := testenv.WaitFor(t, "a Ready pod on each node", time.Minute, func() bool {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			t.Fatal(err)
		}
		pods = list.Items
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
		}
		return ready == len(specs) && len(pods) == len(specs)
	})
	t.Logf("%d pods Ready %s after the Deployment was created", len(pods), took.Round(time.Millisecond))
	onNode := map[string]corev1.Pod{}
	for _, p := range pods {
		onNode[p.Spec.NodeName] = p
	}
	for _, s := range specs {
		p, ok := onNode[s.Name]
		if !ok {
			t.Fatalf("no pod on node %s: %v", s.Name, podPlaces(pods))
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !netip.MustParsePrefix(s.PodSubnet).Contains(ip) {
			t.Errorf("pod %s on %s at %s, want an address from %s", p.Name, s.Name, p.Status.PodIP, s.PodSubnet)
		}
		// Straight to the pod: the host's route to the node's pod subnet goes through the node.
		url := "http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/"
		if st, err := demoapp.Ask(ctx, url); err != nil || st.Pod != p.Name {
			t.Errorf("GET %s (pod %s on %s): %+v, %v", url, p.Name, s.Name, st, err)
		}
	}

	// Through the Service every pod answers sooner or later: node 1's kube-proxy sends the host's
	// connections to either pod, the one on node 2 across the nodes' link.
	url := "http://" + svc.Spec.ClusterIP + "/"
	took = testenv.WaitForEveryAnswer(t, "answers from every pod through the Service", time.Minute, len(pods), func() (string, error) {
		st, err := demoapp.Ask(ctx, url)
		return st.Pod, err
	})
	t.Logf("answers from the pods on %d nodes through the Service %s after they were Ready", len(specs), took.Round(time.Millisecond))

	// From the pod on node 2: the pod on node 1 directly (the nodes' routes to each other's pod
	// subnets), the Service (node 2's own kube-proxy) and the API server through the kubernetes
	// Service.
	from, to := onNode[specs[1].Name], onNode[specs[0].Name]
	dial := n.PodDialer(string(from.UID))
	inPod := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	for _, target := range []struct{ url, want string }{
		{"http://" + net.JoinHostPort(to.Status.PodIP, "8080") + "/", to.Name},
		{url, ""},
	} {
		st, err := demoapp.AskWith(ctx, inPod, target.url)
		if err != nil || (target.want != "" && st.Pod != target.want) {
			t.Errorf("from pod %s on %s, GET %s: %+v, %v; want an answer from %q", from.Name, specs[1].Name, target.url, st, err, target.want)
		}
	}
	kubernetesSvc, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := net.JoinHostPort(kubernetesSvc.Spec.ClusterIP, "443")
	if conn, err := dial(ctx, "tcp", apiAddr); err != nil {
		t.Errorf("from pod %s on %s, the API server through the kubernetes Service %s: %v", from.Name, specs[1].Name, apiAddr, err)
	} else {
		_ = conn.Close()
	}

	stop()
	unlock, err := localnode.LockMachine(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if left := localnode.Leftovers(t.Context()); len(left) > 0 {
		t.Errorf("after Stop, the two nodes left %d things on the machine:\n%s", len(left), strings.Join(left, "\n"))
	}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPlaces names each pod with its node, for messages.
func podPlaces(pods []corev1.Pod) []string {
	var s []string
	for _, p := range pods {
		s = append(s, p.Name+"@"+p.Spec.NodeName)
	}
	return s
}
