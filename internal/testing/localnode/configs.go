package localnode

import (
	"encoding/json"
	"fmt"
)

// kubeconfig returns a kubeconfig for server that authenticates with the client certificate and
// key files and trusts the CA file.
func kubeconfig(server, caFile, certFile, keyFile string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: baton-node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: baton-node
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: baton-node
  context: {cluster: baton-node, user: baton-node}
current-context: baton-node
`, server, caFile, certFile, keyFile)
}

// containerdConfig is containerd 2's configuration (version 3) for the node: its own root, state
// and socket under dir, overlayfs, runc with cgroupfs, the CRI plugin with the given sandbox
// (pause) image and the CNI directories.
//
// Two of containerd's defaults are host paths shared by every containerd on the machine, moved
// or switched off here: the pods' network namespaces are bind-mounted under the CRI plugin's
// state directory (state/io.containerd.grpc.v1.cri/netns) instead of /var/run/netns, and NRI,
// which would listen on /var/run/nri/nri.sock, is off (nothing here uses NRI plugins). Paths
// containerd cannot move (its shims' sockets in /run/containerd/s, libcni's cache in
// /var/lib/cni) are left to cleanUp.
func containerdConfig(dir, runc, cniBinDir, cniConfDir, pauseImage string) []byte {
	return fmt.Appendf(nil, `version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.nri.v1.nri"]
  disable = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[5]q

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  # The kubelet asks for oom_score_adj -998 for sandboxes and -997 for Guaranteed pods; lowering
  # it needs CAP_SYS_RESOURCE, which a host such as a sandboxed VM may not grant even to root
  # (runc then fails with "can't get final child's PID from pipe"). Restricted, containerd never
  # asks for less than its own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[6]q
        Root = %[9]q
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]q]
    conf_dir = %[8]q
`, dir+"/root", dir+"/state", dir+"/containerd.sock", dir+"/containerd.sock.ttrpc", pauseImage, runc, cniBinDir, cniConfDir, dir+"/runc")
}

// cniConfig is the node's pod network: its bridge with its gateway as every pod's default route,
// addresses from host-local (leases under ipamDir), hairpin mode so that a pod reaches itself
// through a Service, and portmap for hostPort.
func cniConfig(spec NodeSpec, ipamDir string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "baton",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      spec.Bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": ipamDir,
					"ranges": []any{[]any{map[string]any{
						"subnet": spec.PodSubnet, "rangeStart": spec.RangeStart, "rangeEnd": spec.RangeEnd, "gateway": spec.PodGateway,
					}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("localnode: CNI configuration: %w", err)
	}
	return b, nil
}

// kubeletConfig is the kubelet's configuration for this kind of host: cgroupfs (no systemd),
// cgroup v1 allowed (the host may be a v1/v2 hybrid), swap tolerated, eviction thresholds low
// enough for a small disk, the API server's client CA trusted for its own API, serving on the
// node's IP, and the pods' logs under the node's directory.
func kubeletConfig(spec NodeSpec, containerdSocket, caFile, certDir, podLogsDir string) []byte {
	return fmt.Appendf(nil, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[1]s
imageServiceEndpoint: unix://%[1]s
address: %[2]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: %[4]s/kubelet.crt
tlsPrivateKeyFile: %[4]s/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[3]s}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: ""
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
shutdownGracePeriod: 0s
protectKernelDefaults: false
maxPods: 110
podLogsDir: %[5]s
%[6]s`, containerdSocket, spec.IP, caFile, certDir, podLogsDir, cgroupRootLine(spec.CgroupRoot))
}

// kubeProxyConfig runs kube-proxy in iptables mode for the node: its name and address, health
// checks and metrics on spec.HealthzIP, and the cluster's pod network as the traffic it does not
// masquerade.
func kubeProxyConfig(spec NodeSpec, kubeconfigFile string) []byte {
	return fmt.Appendf(nil, `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
clusterCIDR: %s
bindAddress: %s
healthzBindAddress: %s:10256
metricsBindAddress: %s:10249
nodePortAddresses: [%s/32]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
`, kubeconfigFile, spec.Name, spec.ClusterCIDR, spec.IP, spec.HealthzIP, spec.HealthzIP, spec.IP)
}

// flags renders name=value pairs as --name=value arguments, in the order given.
func flags(pairs ...string) []string {
	if len(pairs)%2 != 0 {
		panic("localnode: flags needs name, value pairs")
	}
	args := make([]string, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		args = append(args, "--"+pairs[i]+"="+pairs[i+1])
	}
	return args
}

// cgroupRootLine is the kubelet configuration's cgroupRoot line, or nothing for the default.
func cgroupRootLine(root string) string {
	if root == "" {
		return ""
	}
	return fmt.Sprintf("cgroupRoot: %s\n", root)
}
