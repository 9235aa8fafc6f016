package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/fencedstore"
	"github.com/baton-dev/baton/internal/testing/images/demoapp"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// cronNamespaces may use scope Global (the chart's globalNamespaces).
var cronNamespaces = []string{"baton-cron-a", "baton-cron-b"}

// TestSingletonCronJobAcrossNamespaces: the same CronJob in two namespaces, each with a
// DistributedLock of scope Global on one lock ID, mode Blocking. Two Jobs from each CronJob are
// started at once, so they overlap in time. Each Job's app writes 5 times, 200 ms apart, to one
// fenced resource with its token and exits. Every Job reaches Complete (the native sidecar exits
// after the app), the fenced store accepted every write and rejected none, and the writes of one
// Job never interleave with another's: one holder at a time, across namespaces.
func TestSingletonCronJobAcrossNamespaces(t *testing.T) {
	t.Parallel() // mostly waits (on the kubelet, a schedule, a second control plane): runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	for _, ns := range cronNamespaces {
		if err := c.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	fencedURL := startFencedStore(t, ctx, c, cronNamespaces[0]) + "/v1/resources/report"

	const writes, jobsPerNamespace = 5, 2
	for _, ns := range cronNamespaces {
		dl := &batonv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: ns},
			Spec: batonv1.DistributedLockSpec{
				LockIDs: []string{"report"}, Mode: batonv1.ModeBlocking, Scope: batonv1.ScopeGlobal,
				TrafficPolicy: batonv1.TrafficNone, LeaseDuration: &metav1.Duration{Duration: 5 * time.Second},
			},
		}
		if err := c.client.Create(ctx, dl); err != nil {
			t.Fatal(err)
		}
		never := "0 0 1 1 *" // the test starts the Jobs itself, as kubectl create job --from does
		cron := &batchv1.CronJob{
			ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: ns},
			Spec: batchv1.CronJobSpec{
				Schedule: never, ConcurrencyPolicy: batchv1.AllowConcurrent,
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
					BackoffLimit: ptr(int32(0)),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{batonv1.AnnotationLock: "report"}},
						Spec: corev1.PodSpec{
							RestartPolicy: corev1.RestartPolicyNever,
							Containers: []corev1.Container{{
								Name: "app", Image: imagebuild.DemoAppTag, ImagePullPolicy: corev1.PullNever,
								Args: []string{"job"},
								Env: []corev1.EnvVar{
									{Name: demoapp.EnvLockID, Value: "report"},
									{Name: demoapp.EnvFencedURL, Value: fencedURL},
									{Name: demoapp.EnvJobWrites, Value: fmt.Sprint(writes)},
									{Name: demoapp.EnvWriteInterval, Value: "200ms"},
								},
							}},
						},
					},
				}},
			},
		}
		if err := c.client.Create(ctx, cron); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var jobs []client.ObjectKey
	for i := range jobsPerNamespace {
		for _, ns := range cronNamespaces {
			name := fmt.Sprintf("report-%d", i)
			out, err := exec.CommandContext(ctx, c.kubectl, "--kubeconfig", c.node.Kubeconfig, "-n", ns,
				"create", "job", name, "--from=cronjob/report").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl create job --from=cronjob/report: %v\n%s", err, out)
			}
			jobs = append(jobs, client.ObjectKey{Namespace: ns, Name: name})
		}
	}

	testenv.WaitFor(t, "every Job Complete", 4*time.Minute, func() bool {
		complete := 0
		for _, key := range jobs {
			var j batchv1.Job
			if err := c.client.Get(ctx, key, &j); err != nil {
				t.Fatal(err)
			}
			for _, cond := range j.Status.Conditions {
				if cond.Status != corev1.ConditionTrue {
					continue
				}
				switch cond.Type {
				case batchv1.JobFailed:
					t.Fatalf("Job %s failed: %s: %s", key, cond.Reason, cond.Message)
				case batchv1.JobComplete:
					complete++
				}
			}
		}
		return complete == len(jobs)
	})
	t.Logf("%d Jobs in 2 namespaces Complete %s after they were created", len(jobs), time.Since(start).Round(100*time.Millisecond))

	res := fencedResource(t, ctx, fencedURL)
	if want := int64(writes * len(jobs)); res.Accepted != want || res.Rejected != 0 || res.Conflicts != 0 {
		t.Errorf("fenced store: %d accepted, %d rejected, %d conflicts; want %d, 0, 0", res.Accepted, res.Rejected, res.Conflicts, want)
	}
	// One holder at a time: in the order the store received them, the writes come in runs of one
	// writer and one token, the tokens only grow, and no writer comes back after another.
	var runs []fencedstore.Record
	for _, w := range res.Writes {
		if len(runs) == 0 || w.Writer != runs[len(runs)-1].Writer || w.Token != runs[len(runs)-1].Token {
			runs = append(runs, w)
		}
	}
	writers := map[string]bool{}
	for i, r := range runs {
		if writers[r.Writer] {
			t.Errorf("%s wrote again after another writer (token %d, write %d): two holders overlapped", r.Writer, r.Token, r.Seq)
		}
		writers[r.Writer] = true
		if i > 0 && r.Token <= runs[i-1].Token {
			t.Errorf("token %d of %s after %d of %s: tokens must grow", r.Token, r.Writer, runs[i-1].Token, runs[i-1].Writer)
		}
	}
	if len(runs) != len(jobs) {
		t.Errorf("%d runs of writes, want one per Job (%d)", len(runs), len(jobs))
	}
	var order []string
	for _, r := range runs {
		order = append(order, fmt.Sprintf("%s (token %d)", r.Writer, r.Token))
	}
	t.Logf("holders in turn: %s", strings.Join(order, ", "))
}

// startFencedStore runs the demo app's fenced store as a Deployment with a Service in ns and
// returns its base URL once it answers.
func startFencedStore(t *testing.T, ctx context.Context, c cluster, ns string) string {
	t.Helper()
	labels := map[string]string{"app": "fenced"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fenced", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "fenced", Image: imagebuild.DemoAppTag, ImagePullPolicy: corev1.PullNever,
					Args:  []string{"serve-fenced"},
					Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				}}},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "fenced", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, obj := range []client.Object{dep, svc} {
		if err := c.client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	base := "http://" + svc.Spec.ClusterIP
	testenv.WaitFor(t, "the fenced store to answer through its Service", 2*time.Minute, func() bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/resources", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Timeout: time.Second}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

func fencedResource(t *testing.T, ctx context.Context, url string) fencedstore.Resource {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var res fencedstore.Resource
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	return res
}
