package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/sidecarclient"
)

// TestLabelPolicy: in mode Try with trafficPolicy Label every pod's app starts and every pod is
// Ready; once one app takes the lock (through its socket, as an app does), its pod is labelled
// baton.dev/role=holder and the others standby, and a Service selecting the holder label has
// exactly one endpoint, through which only the holder answers.
func TestLabelPolicy(t *testing.T) {
	t.Parallel() // no timing bound but generous deadlines: runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "label-")
	deployDemo(t, ctx, c, ns, 3, batonv1.ModeTry, batonv1.TrafficLabel)
	holderSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-holder", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "demo", batonv1.LabelRole: batonv1.RoleHolder},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if err := c.client.Create(ctx, holderSvc); err != nil {
		t.Fatal(err)
	}

	var pods []corev1.Pod
	took := testenv.WaitFor(t, "3 Ready pods", 2*time.Minute, func() bool {
		pods = demoPods(t, ctx, c, ns)
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
		}
		return len(pods) == 3 && ready == 3
	})
	t.Logf("3 pods Ready %s after the Deployment was created; none holds the lock yet", took.Round(time.Millisecond))
	socket := filepath.Join(c.node.EmptyDir(string(pods[0].UID), inject.SocketVolume), filepath.Base(sidecarclient.SocketPath))
	// Ready says nothing about the sidecar here: in mode Try with trafficPolicy Label no probe of
	// the pod waits for the lock store, so a Ready pod's sidecar may still be opening it and
	// answer 503 starting, which (sidecarclient's doc) means ask again later, as an app does.
	app := sidecarClient(t, socket)
	var st sidecarclient.LockStatus
	var err error
	starting := 0
	testenv.WaitFor(t, pods[0].Name+"'s sidecar to serve its locks", time.Minute, func() bool {
		st, err = app.Acquire(ctx, "demo", 10*time.Second)
		if errors.Is(err, sidecarclient.ErrStarting) {
			if starting++; starting == 1 {
				t.Logf("acquire through %s's socket: %v; asking again", pods[0].Name, err)
			}
			return false
		}
		return true
	})
	if err != nil || st.State != sidecarclient.StateHeld {
		t.Fatalf("acquire through %s's socket: %+v, %v", pods[0].Name, st, err)
	}

	var holder string
	took = testenv.WaitFor(t, "3 Ready pods, one labelled holder and two standby", 2*time.Minute, func() bool {
		pods := demoPods(t, ctx, c, ns)
		roles := map[string][]string{}
		ready := 0
		for _, p := range pods {
			if podReady(p) {
				ready++
			}
			role := p.Labels[batonv1.LabelRole]
			roles[role] = append(roles[role], p.Name)
		}
		if len(pods) != 3 || ready != 3 || len(roles[batonv1.RoleHolder]) != 1 || len(roles[batonv1.RoleStandby]) != 2 {
			return false
		}
		holder = roles[batonv1.RoleHolder][0]
		return lockStatus(t, ctx, c, ns).Holder == holder
	})
	if holder != pods[0].Name {
		t.Fatalf("%s labelled holder; %s took the lock", holder, pods[0].Name)
	}
	t.Logf("%s labelled holder %s after it took the lock", holder, took.Round(time.Millisecond))

	testenv.WaitFor(t, "one endpoint behind the holder Service", time.Minute, func() bool {
		n, err := readyEndpoints(ctx, c, ns, holderSvc.Name)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	url := "http://" + holderSvc.Spec.ClusterIP + "/"
	testenv.WaitFor(t, "kube-proxy to program the holder Service", time.Minute, func() bool {
		_, err := demoapp.Ask(ctx, url) // refused until kube-proxy has synced the endpoint
		return err == nil
	})
	for range 10 {
		st, err := demoapp.Ask(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pod != holder || st.State != sidecarclient.StateHeld {
			t.Fatalf("answer %+v through the holder Service, want %s holding", st, holder)
		}
	}
}

// readyEndpoints counts the ready endpoints of a Service over its EndpointSlices.
func readyEndpoints(ctx context.Context, c cluster, ns, service string) (int, error) {
	slices, err := c.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + service})
	if err != nil {
		return 0, fmt.Errorf("endpoint slices of %s: %w", service, err)
	}
	n := 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}
