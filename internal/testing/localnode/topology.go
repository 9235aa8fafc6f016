package localnode

import "fmt"

// NodeSpec is what differs from one node of a cluster to the next: its name, its address, its pod
// network and where its kube-proxy answers health checks. Everything else (the control plane,
// the CA, the Service network, HostIP as the API server's and the nodes' gateway address) is the
// cluster's.
//
// A cluster has one node in the host's namespaces ([singleNode], with Options.Unsandboxed) or one
// to [MaxNodes] nodes, each in a sandbox of its own ([sandboxedNodes]).
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
	// HostLink is the host's end of the veth pair that joins a sandboxed node to the host bridge
	// (its other end is eth0 in the node); "" for a node in the host's network namespace.
	HostLink string
	// Role is the value of the node's label NodeRoleLabel (the kubelet's --node-labels):
	// RoleSystem for node 1 of a sandboxed cluster, RoleWorker for the others, "" (no label) for
	// today's unsandboxed node.
	Role string
}

// NodeRoleLabel labels each sandboxed node with its role, so that a workload can be steered onto
// the node that is never powered off (RoleSystem, node 1: the gateway of the host's Service
// traffic) or off it (RoleWorker). A test rig's label, not one of baton's keys.
const (
	NodeRoleLabel = "localnode/role"
	RoleSystem    = "system"
	RoleWorker    = "worker"
)

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

// Addresses of sandboxed nodes (issue 27). The host stays
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
	// hostLinkPrefix starts the name of every host end of a node's veth pair, batonv<i>; cleanUp
	// deletes the links so named.
	hostLinkPrefix = "batonv"
	// nodeCgroupPrefix starts the name of every sandboxed node's cgroup, baton-node-<i>; cleanUp
	// kills and removes the cgroups so named.
	nodeCgroupPrefix = "baton-node-"
)

// sandboxNodeName returns the name of sandboxed node i (1-based).
func sandboxNodeName(i int) string { return fmt.Sprintf("baton-node-%d", i) }

// sandboxedNodes returns the specs of n sandboxed nodes, 1 ≤ n ≤ MaxNodes: node i is
// sandboxNodeName(i) at 198.18.0.(10+i), pods 198.18.(16+i).2-254 with gateway .1 on podBridgeName,
// kube-proxy's health checks on the node's IP (the host probes it there), and cgroup root
// /baton-node-<i>, joined to the host bridge by the veth batonv<i>.
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
			HostLink:    fmt.Sprintf("%s%d", hostLinkPrefix, i),
			Role:        RoleWorker,
		}
		if i == 1 {
			specs[i-1].Role = RoleSystem
		}
	}
	return specs, nil
}
