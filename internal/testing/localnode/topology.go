package localnode

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
}

// singleNode is the one node of today's cluster: in the host's network namespace, the host's own
// address on the bridge as its InternalIP, and every pod on baton0.
func singleNode() NodeSpec {
	return NodeSpec{
		Name:       NodeName,
		IP:         HostIP,
		PodSubnet:  PodSubnet,
		RangeStart: PodRangeStart,
		RangeEnd:   PodRangeEnd,
		PodGateway: HostIP,
		Bridge:     bridgeName,
		HealthzIP:  "127.0.0.1",
	}
}
