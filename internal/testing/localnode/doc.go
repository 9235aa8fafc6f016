// Package localnode gives the tests a real Kubernetes node on this machine:
// it installs what a node runs and runs it — containerd with runc and CNI,
// the kubelet and kube-proxy, next to a control plane from internal/testing/localkube
// — without Docker, kind, or downloaded release tarballs.
//
// # Install
//
// [Install] makes sure every binary is there and returns their paths as
// [Binaries]:
//
//   - kube-scheduler, kubelet and kube-proxy localkube.KubernetesVersion,
//     built by localkube ([localkube.KubeScheduler], [localkube.Kubelet],
//     [localkube.KubeProxy]) into the control plane's bin directory;
//   - containerd, containerd-shim-runc-v2 and ctr [ContainerdVersion] and
//     the [CNIPlugins] bridge, host-local, loopback and portmap
//     [CNIPluginsVersion], built from their Go modules like localkube's
//     tools (internal/build/gobuild), without cgo;
//   - runc, iptables and conntrack from the host, installed with
//     `apt-get install -y --no-install-recommends` (apt-get update only if
//     that fails for want of package lists) when missing and the process is
//     root. Otherwise Install returns an error wrapping [ErrMissingPackages]
//     that says what to install.
//
// The cache, next to localkube's:
//
//	${XDG_CACHE_HOME:-$HOME/.cache}/baton/node/
//	    containerd/<ContainerdVersion>/
//	        src/containerd/          requires github.com/containerd/containerd/v2
//	                                 with tool directives for cmd/containerd,
//	                                 cmd/containerd-shim-runc-v2 and cmd/ctr
//	        bin/containerd, bin/containerd-shim-runc-v2, bin/ctr
//	        .installed-containerd    stamp, written after all three binaries
//	        build-containerd.log
//	    cni/<CNIPluginsVersion>/
//	        src/cni-plugins/         requires github.com/containernetworking/plugins
//	        bin/bridge, bin/host-local, bin/loopback, bin/portmap
//	        .installed-cni-plugins
//	        build-cni-plugins.log
//	    apt.log                      the last apt-get run
//
// containerd is built with CGO_ENABLED=0 and the build tags of its
// Makefile's static build (urfave_cli_no_docs osusergo netgo static_build,
// and no_grpc for the shim) plus no_btrfs no_devmapper no_zfs: a node on
// overlayfs needs none of those snapshotters. Its version package is
// stamped, so `containerd --version` reports ContainerdVersion; the plugins
// report CNIPluginsVersion. Each build holds its directory's file lock and
// writes its stamp last, so Install is safe from several processes at once
// and a build cut short is redone. Install prints a line at the start and
// end of every step, a heartbeat each minute while go build, go mod download
// or apt-get is silent, and one line per component on a cache hit; a module
// download or apt-get attempt that stalls is given up after a bounded time
// and tried again (gobuild.Step). With the control plane already
// built (as `make install-deps` does first), all of it takes three to four
// minutes on two cores; with an empty Go build cache about eight.
// [Installed] reports the paths without building or installing anything.
//
// What Install does not do: check that the host can run a node (root,
// overlayfs, bridge netfilter, cgroups; see [CheckHost]), load kernel
// modules, or pick runc's version: Debian 12's runc is 1.1, older than the
// runc containerd is tested with.
//
// `go run ./hack/kube install` (and so `make install-deps`) runs Install
// after localkube's builds; `go run ./hack/kube node-path` prints the paths.
//
// # Running a node
//
// [Start] runs a cluster as root on the binaries Install returns
// ([ComponentsOf]) and waits until its nodes are Ready: etcd, kube-apiserver
// (Node and RBAC authorization, ServiceAccount admission on, so pods get
// tokens), kube-controller-manager and kube-scheduler; then, per node,
// containerd (its own root, state and socket), the kubelet (cgroupfs, cgroup
// v1 tolerated) and kube-proxy in iptables mode. Each component has a client
// certificate with the identity the API server's bootstrap RBAC expects
// (system:kube-controller-manager, system:node:baton-node-1, ...); the admin's
// kubeconfig is [Node.Kubeconfig]. Images are docker-archive tarballs
// imported with ctr into every node before its kubelet starts; nothing is
// ever pulled.
//
// Each node runs in a sandbox of its own (issue 27), the way kind's node
// containers do but without an image or a container runtime around it: a
// holder process in fresh network, mount and UTS namespaces, the node's
// daemons entering them with nsenter, a cgroup root /baton-node-<i> in every
// hierarchy (the kubelet's cgroupRoot, so the node's pods are below it too),
// and the host paths containerd and the kubelet cannot move replaced by the
// node's own inside its mount namespace. [Options].Nodes asks for 1 (the
// default) to [MaxNodes] nodes: node i is baton-node-<i> at 198.18.0.(10+i)
// on [NodeSubnet], with its pods on 198.18.(16+i).0/24 behind a bridge of its
// own, all inside [SandboxClusterCIDR], and the label [NodeRoleLabel]
// ([RoleSystem] for node 1, [RoleWorker] for the others). Node 1 starts first
// and must start; the others start after it side by side, and one that fails
// is named in [Node].Missing while the cluster runs without it.
//
// The network exists only on this machine, in 198.18.0.0/15 (reserved for
// benchmarking, RFC 2544): a bridge baton0 with the host at [HostIP] and one
// veth batonv<i> per node; a route from the host and from every node to each
// node's pods through that node (no overlay, as kindnet does); Services in
// [ServiceSubnet], routed from the host through node 1, whose kube-proxy
// translates and masquerades the host's Service traffic; and an iptables
// chain that rejects anything the nodes send beyond the bridge. No sysctl of
// the host's network is changed. The API server and the tests' Cassandra
// listen on HostIP, the nodes' default gateway; pods reach the API server
// through the kubernetes Service. Everything the nodes write is under
// [BaseDir] (node 1 in BaseDir itself, node i ≥ 2 in BaseDir/nodes/<i>); the
// components log to <dir>/logs, the pods to <dir>/pod-logs. One cluster runs
// on a machine at a time (a file lock in /run): a second Start waits.
//
// With [Options].Unsandboxed, or the environment variable BATON_NODE_SANDBOX=0
// (for a machine that cannot run the sandbox, or to compare), Start runs the
// node of before instead: baton-node, in the host's namespaces, with HostIP as
// its address, its pods on baton0 itself from [PodRangeStart] to
// [PodRangeEnd], and host forwarding and bridged traffic through iptables
// turned on. It has one node only.
//
// The code has two halves: the control plane (controlplane.go: the CA,
// etcd, the API server, the controllers) and the node (node.go: containerd,
// the kubelet, kube-proxy), which a [NodeSpec] configures (name, address,
// pod network, bridge, cgroup root, role) and which keeps every file under a
// directory of its own.
//
// containerd is told to keep off two paths every containerd on a machine
// shares: the pods' network namespaces are mounted under its state directory
// (netns_mounts_under_state_dir), not in /var/run/netns, and NRI, which would
// listen on /var/run/nri/nri.sock, is off.
//
// The kubelet changes machine-wide kernel settings when it starts
// (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
// kernel.keys.root_maxkeys and root_maxbytes), and the unsandboxed node turns
// on forwarding and bridged traffic through iptables. Start saves their values first, in
// /run/baton-node/sysctl.saved, and only if that file is absent, so that
// after a crash the values from before the crashed node are the ones kept;
// Stop, and the next Start, put them back. Values from before the first node
// that did not save them are not known.
//
// [Node.Stop] stops the components, destroys each node's sandbox with
// everything in it, kills what is left in the kubepods cgroups and the
// containerd shims, unmounts, deletes the pods' network
// namespaces, kube-proxy's and the kubelet's iptables chains, the bridge,
// what the components write outside BaseDir because they cannot be told
// otherwise (shims' sockets in /run/containerd/s once nothing listens on
// them, libcni's results for the pod network in /var/lib/cni/results, the
// kubelet's links to pod logs in /var/log/containers, its stale
// device-plugin socket) and BaseDir, and puts the kernel settings back;
// Start does the same first, for a node that was never stopped. It also
// ends sandboxed nodes running, frozen or left by a crashed run: every process in a baton-node-* cgroup (thawed first), those cgroups, and
// the host links batonv* that a surviving process kept.
// [Leftovers] lists what of all this is on the machine: empty after Stop.
//
// The sandbox's pieces, each tested on its own on this machine:
// cgroupLayout (a node's cgroup root in every hierarchy, frozen or killed
// as one), sandbox (the holder, nsenter, the private paths, and the node's
// side of the network, joined to the host by its veth: attach),
// sandboxedNodes (the addressing) and setUpHostNetwork (the host's side).
//
// What a real host needed that a stand-in would not show: the kubelet asks
// for oom_score_adj -998 for pod sandboxes, which needs CAP_SYS_RESOURCE; a
// sandboxed VM may not grant it even to root, and runc then fails with "can't
// get final child's PID from pipe". containerd's restrict_oom_score_adj keeps
// the request at containerd's own value.
package localnode
