package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestServiceReachesEveryPod: a Deployment of the demo app (imported image, pulled never; no
// sidecar, so it answers 503 with its pod name) is scheduled, started by the kubelet through containerd and runc, gets addresses on the
// pod bridge, and its Service's cluster IP, programmed by kube-proxy, answers from every replica.
func TestServiceReachesEveryPod(t *testing.T) {
	t.Parallel() // no timing bound but generous deadlines: runs beside the others of its kind
	n := node.Get(t)
	client, err := kubernetes.NewForConfig(n.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const replicas = 2
	labels := map[string]string{"app": "demo"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "demo", Image: imagebuild.DemoAppTag, ImagePullPolicy: corev1.PullNever,
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 1,
					},
				}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(svc.Spec.ClusterIP, "198.19.") {
		t.Errorf("cluster IP %s, want one in %s", svc.Spec.ClusterIP, localnode.ServiceSubnet)
	}

	var pods *corev1.PodList
	took := testenv.WaitFor(t, fmt.Sprintf("%d pods Ready", replicas), time.Minute, func() bool {
		pods, err = client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		for _, p := range pods.Items {
			if podReady(p) {
				ready++
			}
		}
		return ready == replicas && len(pods.Items) == replicas
	})
	t.Logf("%d pods Ready %s after the Deployment was created", replicas, took.Round(time.Millisecond))
	specs := map[string]localnode.NodeSpec{}
	for _, s := range n.Specs() {
		specs[s.Name] = s
	}
	for _, p := range pods.Items {
		spec, ok := specs[p.Spec.NodeName]
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if !ok || err != nil || !netip.MustParsePrefix(spec.PodSubnet).Contains(ip) {
			t.Errorf("pod %s on node %q at %s, want one of the cluster's nodes %v and an address from that node's pod subnet", p.Name, p.Spec.NodeName, p.Status.PodIP, n.Specs())
		}
	}

	// Through the Service, every replica answers sooner or later; each answer names its pod.
	seen := map[string]bool{}
	url := "http://" + svc.Spec.ClusterIP + "/"
	took = testenv.WaitForEveryAnswer(t, "answers from every pod through the Service", time.Minute, replicas, func() (string, error) {
		st, err := demoapp.Ask(ctx, url)
		if err == nil {
			seen[st.Pod] = true
		}
		return st.Pod, err
	})
	t.Logf("answers from every pod through the Service %s after they were Ready", took.Round(time.Millisecond))
	for _, p := range pods.Items {
		if !seen[p.Name] {
			t.Errorf("no answer from %s; answers from %v", p.Name, seen)
		}
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

func ptr[T any](v T) *T { return &v }
