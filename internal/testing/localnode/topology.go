package localnode

import "fmt"

// NodeSpec is what differs from one node of a cluster to the next: its name, its address, its pod
// network and where its kube-proxy answers health checks. Everything else (the control plane,
// the CA, the Service network, HostIP as the API server's and the nodes' gateway address) is the
// cluster's.
//
// Today a cluster has one node, [singleNode], which lives in the host's network namespace; the
// fields exist so that further nodes, each in a sandbox of its own, can differ in them.
type NodeSpec struct {
	// Name is the node's name in the API (the kubelet's --hostname-override, kube-proxy's
	// hostnameOverride and the CommonName system:node:<Name> of its client certificate).
	Name string
	// IP is the node's InternalIP: the kubelet's address and --node-ip, the SAN of its serving
	// certificate, kube-proxy's bindAddress and its NodePort address.
	IP string
	// PodSubnet is the subnet of the node's CNI bridge; its pods get addresses from RangeStart to
	// RangeEnd, with PodGateway as their default route.
	PodSubnet, RangeStart, RangeEnd, PodGateway string
	// Bridge is the name of the CNI bridge the node's pods are attached to.
	Bridge string
	// HealthzIP is where kube-proxy serves /healthz (port 10256) and its metrics (port 10249),
	// and where Start probes it from the host.
	HealthzIP string
	// ClusterCIDR is kube-proxy's clusterCIDR: traffic from outside it to a Service is
	// masqueraded. The same for every node of a cluster.
	ClusterCIDR string
	// CgroupRoot is the kubelet's cgroupRoot, under which it puts every pod ("": the kubelet's
	// default, the root of each hierarchy).
	CgroupRoot string
}

// singleNode is the one node of today's cluster: in the host's network namespace, the host's own
// address on the bridge as its InternalIP, and every pod on baton0.
func singleNode() NodeSpec {
	return NodeSpec{
		Name:        NodeName,
		IP:          HostIP,
		PodSubnet:   PodSubnet,
		RangeStart:  PodRangeStart,
		RangeEnd:    PodRangeEnd,
		PodGateway:  HostIP,
		Bridge:      bridgeName,
		HealthzIP:   "127.0.0.1",
		ClusterCIDR: PodSubnet,
	}
}

// Addresses of sandboxed nodes (issue 27, increment 1; no node uses them yet). The host stays
// HostIP on baton0, the API server's and Cassandra's address and the nodes' default gateway;
// node i (1-based) is 198.18.0.(10+i) on NodeSubnet, and its pods are on 198.18.(16+i).0/24 behind
// a bridge of its own, all inside SandboxClusterCIDR, which excludes NodeSubnet so that traffic
// from the host or a node to a Service is masqueraded and its answer comes back the same way.
const (
	NodeSubnet         = "198.18.0.0/24"
	SandboxClusterCIDR = "198.18.16.0/20"
	// MaxNodes is how many sandboxed nodes a cluster may have.
	MaxNodes = 3

	podBridgeName = "baton-pods"
)

// sandboxNodeName returns the name of sandboxed node i (1-based).
func sandboxNodeName(i int) string { return fmt.Sprintf("baton-node-%d", i) }

// sandboxedNodes returns the specs of n sandboxed nodes, 1 ≤ n ≤ MaxNodes: node i is
// sandboxNodeName(i) at 198.18.0.(10+i), pods 198.18.(16+i).2-254 with gateway .1 on podBridgeName,
// kube-proxy's health checks on the node's IP (the host probes it there), and cgroup root
// /baton-node-<i>.
func sandboxedNodes(n int) ([]NodeSpec, error) {
	if n < 1 || n > MaxNodes {
		return nil, fmt.Errorf("localnode: %d nodes: want 1 to %d", n, MaxNodes)
	}
	specs := make([]NodeSpec, n)
	for i := 1; i <= n; i++ {
		ip := fmt.Sprintf("198.18.0.%d", 10+i)
		pods := fmt.Sprintf("198.18.%d", 16+i)
		specs[i-1] = NodeSpec{
			Name:        sandboxNodeName(i),
			IP:          ip,
			PodSubnet:   pods + ".0/24",
			RangeStart:  pods + ".2",
			RangeEnd:    pods + ".254",
			PodGateway:  pods + ".1",
			Bridge:      podBridgeName,
			HealthzIP:   ip,
			ClusterCIDR: SandboxClusterCIDR,
			CgroupRoot:  "/" + sandboxNodeName(i),
		}
	}
	return specs, nil
}
