package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// sidecarMetricsPort is the chart's sidecar.metricsPort in the e2e install: every sidecar of
// these tests serves its metrics on its pod's IP.
const sidecarMetricsPort = 9464

// TestSidecarMetricsPort: with sidecar.metricsPort set, the injected sidecar starts (it used to
// refuse the address the webhook injects and exit), declares the port baton-metrics, and serves
// its metrics on the pod's IP, where Prometheus scrapes them: the holder's baton_lock_held is 1
// and its baton_lock_token is the token the DistributedLock's status shows.
func TestSidecarMetricsPort(t *testing.T) {
	t.Parallel() // no timing bound but generous deadlines: runs beside the others of its kind
	c := batonCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ns := testenv.Namespace(t, c.client, "metrics-")
	deployDemo(t, ctx, c, ns, 1, batonv1.ModeBlocking, batonv1.TrafficReadinessGate)
	holder, token := waitForOneReady(t, ctx, c, ns, 1)

	var declared bool
	for _, ctr := range append(holder.Spec.InitContainers, holder.Spec.Containers...) {
		for _, p := range ctr.Ports {
			declared = declared || (ctr.Name == inject.ContainerName && p.Name == inject.MetricsPortName && p.ContainerPort == sidecarMetricsPort)
		}
	}
	if !declared {
		t.Errorf("the sidecar of %s does not declare port %s %d", holder.Name, inject.MetricsPortName, sidecarMetricsPort)
	}
	for _, st := range append(holder.Status.InitContainerStatuses, holder.Status.ContainerStatuses...) {
		if st.Name == inject.ContainerName && st.RestartCount != 0 {
			t.Errorf("the sidecar of %s restarted %d times: %+v", holder.Name, st.RestartCount, st.LastTerminationState)
		}
	}

	url := "http://" + net.JoinHostPort(holder.Status.PodIP, strconv.Itoa(sidecarMetricsPort)) + "/metrics"
	wantHeld := `baton_lock_held{lock="demo"} 1`
	wantToken := fmt.Sprintf(`baton_lock_token{lock="demo"} %s`, strconv.FormatFloat(float64(token), 'g', -1, 64))
	var body string
	defer func() {
		if t.Failed() {
			t.Logf("last scrape of %s:\n%.3000s", url, body)
		}
	}()
	took := testenv.WaitFor(t, "the holder's metrics on its pod IP", time.Minute, func() bool {
		body = scrape(ctx, url)
		return strings.Contains(body, wantHeld) && strings.Contains(body, wantToken)
	})
	t.Logf("scraped %s (%s after the pod was Ready): %q and %q", url, took.Round(time.Millisecond), wantHeld, wantToken)
}

// scrape returns the body of a GET of url, or "" when it fails.
func scrape(ctx context.Context, url string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
