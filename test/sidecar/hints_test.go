package main_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
)

// metric reads one sample of a sidecar's metrics endpoint: the value of the line that starts with
// name (with its labels), or -1 when there is none.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// TestSidecarsHandOffWithHints: sidecar processes that listen for hand-off hints on their "pod
// IPs" (127.0.0.11 to .13, one port, as pods share a port on different IPs) hand the lock over
// on SIGTERM by a hint: the next holder's metrics count a hint delivered to its waiting lock,
// and the releasing side counts hints sent.
func TestSidecarsHandOffWithHints(t *testing.T) {
	ns := fmt.Sprintf("hints-%d", time.Now().UnixNano())
	storeReady(t)
	port := testenv.FreePort(t)
	var all []*sidecarProc
	metricsURL := map[*sidecarProc]string{}
	for i, name := range []string{"h1", "h2", "h3"} {
		mport := testenv.FreePort(t)
		p := startSidecar(t, ns, name, fmt.Sprintf("POD_IP=127.0.0.%d", 11+i), fmt.Sprintf("BATON_HINT_PORT=%d", port),
			"BATON_HINT_ALLOW_LOOPBACK=true", fmt.Sprintf("BATON_METRICS_ADDR=127.0.0.1:%d", mport))
		metricsURL[p] = fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)
		all = append(all, p)
		if i == 0 {
			onlyHolder(t, all, 10*time.Second)
		}
	}
	holder := onlyHolder(t, all, 10*time.Second)
	streams := watchOthers(t, all, holder)

	termAt := time.Now()
	holder.cmd.Process.Signal(syscall.SIGTERM)
	next, _ := firstAcquirer(t, streams, 10*time.Second)
	t.Logf("hand-off after SIGTERM with hints: %s acquired %v after the signal", next.name, time.Since(termAt).Round(time.Millisecond))
	if got := metric(t, metricsURL[next], `baton_hints_received_total{result="delivered"}`); got < 1 {
		t.Errorf("the new holder %s counts %v hints delivered to its lock, want at least 1", next.name, got)
	}
	if got := metric(t, metricsURL[next], `baton_hints_received_total{result="malformed"}`); got != 0 {
		t.Errorf("the new holder counts %v malformed hint datagrams", got)
	}
	// The waiter behind the head probed it from the hint port they share: answered, never refused
	// as a foreign source (hintudp.Config.EchoPort, which the sidecar sets to its hint port).
	probes := 0.0
	for _, p := range all {
		if p == holder {
			continue // gone
		}
		probes += metric(t, metricsURL[p], `baton_hints_received_total{result="probe"}`)
		if got := metric(t, metricsURL[p], `baton_hint_probes_unanswered_total{reason="refused"}`); got != 0 {
			t.Errorf("%s refused %v probes (-1: no such metric) from sidecars on the shared hint port", p.name, got)
		}
	}
	if probes < 1 {
		t.Errorf("the sidecars still running received %v probes; want the waiter's behind the head", probes)
	}
}
