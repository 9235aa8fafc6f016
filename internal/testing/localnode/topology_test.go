package localnode

import (
	"net/netip"
	"strings"
	"testing"
)

// TestSandboxedNodesAddressing checks the addressing rules of design §4 for every cluster size:
// node IPs on NodeSubnet and outside the cluster CIDR (else the host's Service traffic is not
// masqueraded and its answers take another path), every pod range inside its node's subnet and
// the cluster CIDR, the gateway outside the range, subnets disjoint, names, cgroup roots and host
// links unique and named as cleanUp finds them; and the configs of a sandboxed node carry its
// values.
func TestSandboxedNodesAddressing(t *testing.T) {
	for _, bad := range []int{0, MaxNodes + 1} {
		if _, err := sandboxedNodes(bad); err == nil {
			t.Errorf("sandboxedNodes(%d): want an error", bad)
		}
	}
	nodeNet := netip.MustParsePrefix(NodeSubnet)
	cluster := netip.MustParsePrefix(SandboxClusterCIDR)
	host := netip.MustParseAddr(HostIP)
	if cluster.Contains(host) || !nodeNet.Contains(host) {
		t.Errorf("HostIP %s: want on %s and outside %s", host, nodeNet, cluster)
	}
	for n := 1; n <= MaxNodes; n++ {
		specs, err := sandboxedNodes(n)
		if err != nil || len(specs) != n {
			t.Fatalf("sandboxedNodes(%d) = %d specs, %v", n, len(specs), err)
		}
		seen := map[string]bool{}
		var subnets []netip.Prefix
		for _, s := range specs {
			ip := netip.MustParseAddr(s.IP)
			pods := netip.MustParsePrefix(s.PodSubnet)
			gw, lo, hi := netip.MustParseAddr(s.PodGateway), netip.MustParseAddr(s.RangeStart), netip.MustParseAddr(s.RangeEnd)
			switch {
			case !nodeNet.Contains(ip) || cluster.Contains(ip) || ip == host:
				t.Errorf("%s: IP %s not on %s, or inside %s, or the host's", s.Name, ip, nodeNet, cluster)
			case pods.Masked() != pods || !cluster.Contains(pods.Addr()) || pods.Bits() < cluster.Bits():
				t.Errorf("%s: pod subnet %s not inside %s", s.Name, pods, cluster)
			case !pods.Contains(gw) || !pods.Contains(lo) || !pods.Contains(hi) || lo.Compare(hi) > 0 || (gw.Compare(lo) >= 0 && gw.Compare(hi) <= 0):
				t.Errorf("%s: gateway %s and range %s-%s must be in %s, the gateway outside the range", s.Name, gw, lo, hi, pods)
			case s.HealthzIP != s.IP || s.ClusterCIDR != SandboxClusterCIDR || s.Bridge != podBridgeName:
				t.Errorf("%s: %+v", s.Name, s)
			case !strings.HasPrefix(s.HostLink, hostLinkPrefix) || len(s.HostLink) > 15 || !strings.HasPrefix(s.CgroupRoot, "/"+nodeCgroupPrefix):
				// cleanUp finds a crashed node's link and cgroups by these prefixes; 15 is IFNAMSIZ-1.
				t.Errorf("%s: host link %q (want %s*, at most 15 bytes), cgroup root %q (want /%s*)", s.Name, s.HostLink, hostLinkPrefix, s.CgroupRoot, nodeCgroupPrefix)
			}
			if want := map[bool]string{true: RoleSystem, false: RoleWorker}[s.Name == sandboxNodeName(1)]; s.Role != want {
				// Node 1 is the host's gateway to Services and is never powered off.
				t.Errorf("%s: role %q, want %q", s.Name, s.Role, want)
			}
			for _, other := range subnets {
				if other.Overlaps(pods) {
					t.Errorf("%s: pod subnet %s overlaps %s", s.Name, pods, other)
				}
			}
			subnets = append(subnets, pods)
			for _, key := range []string{s.Name, s.IP, s.CgroupRoot, s.HostLink} {
				if seen[key] {
					t.Errorf("n=%d: %s used twice", n, key)
				}
				seen[key] = true
			}
		}
	}

	specs, _ := sandboxedNodes(2)
	s := specs[1]
	kubelet := string(kubeletConfig(s, "/n/containerd.sock", "/ca.crt", "/n/pki", "/n/pod-logs"))
	proxy := string(kubeProxyConfig(s, "/n/kubeconfig"))
	for what, want := range map[string][]string{
		kubelet: {"address: 198.18.0.12\n", "cgroupRoot: /baton-node-2\n"},
		proxy:   {"hostnameOverride: baton-node-2\n", "clusterCIDR: 198.18.16.0/20\n", "healthzBindAddress: 198.18.0.12:10256\n", "nodePortAddresses: [198.18.0.12/32]\n"},
	} {
		for _, line := range want {
			if !strings.Contains(what, line) {
				t.Errorf("config lacks %q:\n%s", line, what)
			}
		}
	}
	if strings.Contains(string(kubeletConfig(singleNode(), "/s", "/c", "/p", "/l")), "cgroupRoot") {
		t.Error("today's node's kubelet config has a cgroupRoot: it must keep the kubelet's default")
	}
}

// TestNodeCount: Options.Nodes wins; without it BATON_NODES says how many nodes, 1 without either;
// a count out of range or not a number is an error. BATON_NODE_SANDBOX=0 (only 0) turns the
// sandbox off.
func TestNodeCount(t *testing.T) {
	for _, c := range []struct {
		nodes int
		env   string
		want  int
		bad   bool
	}{
		{0, "", 1, false}, {2, "", 2, false}, {0, "3", 3, false}, {2, "3", 2, false},
		{0, "4", 0, true}, {0, "0", 0, true}, {0, "two", 0, true},
	} {
		t.Setenv(nodesEnv, c.env)
		got, err := Options{Nodes: c.nodes}.nodeCount()
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("Nodes %d, %s=%q: %d, %v; want %d (error: %v)", c.nodes, nodesEnv, c.env, got, err, c.want, c.bad)
		}
	}
	for env, want := range map[string]bool{"": true, "1": true, "0": false} {
		t.Setenv(sandboxEnv, env)
		if got := (Options{}).sandboxed(); got != want {
			t.Errorf("%s=%q: sandboxed %v, want %v", sandboxEnv, env, got, want)
		}
	}
	t.Setenv(sandboxEnv, "")
	if (Options{Unsandboxed: true}).sandboxed() {
		t.Error("Options.Unsandboxed: sandboxed")
	}
}
