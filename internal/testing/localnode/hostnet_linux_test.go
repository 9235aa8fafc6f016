package localnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHostNetworkReachesPods builds the host's side of two sandboxed nodes' network
// (setUpHostNetwork, attach) with a pod on node 2 (a network namespace of its own on node 2's pod
// bridge, in node 2's cgroup) and a Service address programmed on node 1 as kube-proxy would
// (DNAT to the pod, and masquerade for traffic from outside the cluster CIDR). From the host, the
// pod answers on its own address, through the route to node 2's pod subnet, and sees the host's
// address; and through the Service address, which the host routes to node 1, it sees node 1's
// address, so its answer went back through node 1; an address of 198.18.0.0/15 that nothing has
// is routed to baton0, not off the machine. Then, node 2 frozen, cleanUp ends both nodes and the
// pod and leaves the machine as it was.
func TestHostNetworkReachesPods(t *testing.T) {
	l := ownMachine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	specs, err := sandboxedNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := setUpHostNetwork(ctx, specs); err != nil {
		t.Fatal(err)
	}
	var nodes []*sandbox
	for _, spec := range specs {
		s, err := newSandbox(l, strings.TrimPrefix(spec.CgroupRoot, "/"), spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.destroy() })
		nodes = append(nodes, s)
		if err := s.attach(ctx, spec, specs); err != nil {
			t.Fatal(err)
		}
	}
	podIP := specs[1].RangeStart
	pod := podOn(ctx, t, l, nodes[1], specs[1], podIP)
	ln, err := listenIn(fmt.Sprintf("/proc/%d/ns/net", pod.pid()), net.JoinHostPort(podIP, "8080"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "pod saw %s", r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// What kube-proxy on node 1 would program for a Service with the pod as its endpoint.
	const serviceIP = "198.19.0.10"
	for _, rule := range [][]string{
		{"-t", "nat", "-A", "PREROUTING", "-d", serviceIP + "/32", "-p", "tcp", "--dport", "80", "-j", "DNAT", "--to-destination", podIP + ":8080"},
		{"-t", "nat", "-A", "POSTROUTING", "-m", "conntrack", "--ctstate", "DNAT", "!", "-s", SandboxClusterCIDR, "-j", "MASQUERADE"},
	} {
		if _, err := nodes[0].run(ctx, append([]string{"iptables", "-w"}, rule...)...); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("two nodes, a pod and a Service in %s", time.Since(start).Round(time.Millisecond))

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, c := range []struct{ url, want string }{
		{"http://" + net.JoinHostPort(podIP, "8080") + "/", "pod saw " + HostIP + ":"},
		{"http://" + serviceIP + "/", "pod saw " + specs[0].IP + ":"},
	} {
		got, err := get(ctx, client, c.url)
		if err != nil {
			t.Errorf("from the host: %v", err)
		} else if !strings.HasPrefix(got, c.want) {
			t.Errorf("from the host, %s answered %q, want %q...", c.url, got, c.want)
		}
	}

	// An address of the range that nothing has stays on baton0, not the default route.
	if out, err := exec.CommandContext(ctx, "ip", "route", "get", "198.18.200.1").CombinedOutput(); err != nil || !strings.Contains(string(out), " dev "+bridgeName+" ") {
		t.Errorf("ip route get 198.18.200.1: %s (%v), want it on %s", strings.TrimSpace(string(out)), err, bridgeName)
	}

	// Node 2 frozen, as a powered-off node is; then cleanUp alone, as Stop and the next Start run
	// it, ends both nodes and the pod and removes everything.
	if err := l.freeze(nodes[1].name, true, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := cleanUp(ctx, ""); err != nil {
		t.Error(err)
	}
	t.Logf("the host cleaned up in %s", time.Since(start).Round(time.Millisecond))
	for _, s := range append([]*sandbox{pod}, nodes...) {
		select { // killed: only its reaping here may lag
		case <-s.exited:
		case <-time.After(5 * time.Second):
			t.Errorf("the holder of %s runs 5s after cleanUp", s.name)
		}
	}
	if left := Leftovers(ctx); len(left) > 0 {
		t.Errorf("left on the machine:\n%s", strings.Join(left, "\n"))
	}
}

// podOn makes a stand-in for a pod on node: a sandbox in a cgroup below the node's (as the kubelet
// puts pods below its cgroup root), joined to the node's pod bridge by a veth pair, with ip on
// its eth0 and the node's pod gateway as its default route, as the CNI bridge plugin does it.
func podOn(ctx context.Context, t *testing.T, l cgroupLayout, node *sandbox, spec NodeSpec, ip string) *sandbox {
	t.Helper()
	pod, err := newSandbox(l, node.name+"/pod", "pod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pod.destroy() })
	bits := strings.Split(spec.PodSubnet, "/")[1]
	for _, step := range []struct {
		in   *sandbox
		argv []string
	}{
		{node, []string{"ip", "link", "add", "vethpod", "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pod.pid())}},
		{node, []string{"ip", "link", "set", "vethpod", "master", spec.Bridge, "up"}},
		{pod, []string{"ip", "addr", "add", ip + "/" + bits, "dev", "eth0"}},
		{pod, []string{"ip", "link", "set", "eth0", "up"}},
		{pod, []string{"ip", "route", "add", "default", "via", spec.PodGateway}},
	} {
		if _, err := step.in.run(ctx, step.argv...); err != nil {
			t.Fatal(err)
		}
	}
	return pod
}

func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// ownMachine is the preamble of the tests that change the machine's network and cgroups the way a
// node does (the bridge baton0, its routes, the fence chain, batonv* links, baton-node-*
// cgroups): hostCgroups' checks and the commands they run, then the machine lock, held until the
// test ends so that no node of another process runs meanwhile, and cleanUp before (what an
// earlier run left) and after the test.
func ownMachine(t *testing.T) cgroupLayout {
	t.Helper()
	l := hostCgroups(t, "a node's network and cgroups")
	for _, cmd := range []string{"ip", "iptables", "nsenter"} {
		if _, err := exec.LookPath(cmd); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("needs %s: %v", cmd, err)
			}
			t.Skipf("needs %s: %v", cmd, err)
		}
	}
	// A node of another process may run for many minutes (an end-to-end package); wait for it.
	lockCtx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	unlock, err := LockMachine(lockCtx)
	if err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	clean := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cleanUp(ctx, ""); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	}
	t.Cleanup(func() {
		clean()
		unlock()
	})
	clean()
	t.Logf("machine lock after %s, cleaned up in %s", locked.Sub(start).Round(time.Millisecond), time.Since(locked).Round(time.Millisecond))
	return l
}
