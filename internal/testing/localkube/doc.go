// Package localkube builds the real Kubernetes control-plane binaries
// (kube-apiserver, kube-controller-manager and etcd), the client tools
// (kubectl and helm) and the binaries a node adds (kube-scheduler, kubelet
// and kube-proxy, for internal/testing/localnode) from their Go modules, caches
// them by version, and starts controller-runtime's envtest against them —
// without Docker, kind, or downloaded release tarballs. The build plumbing
// (throwaway modules, stamps, file lock, progress lines) is
// internal/build/gobuild's.
//
// # Install
//
// [Install] writes two throwaway Go modules (not part of the baton module)
// and builds them with the machine's Go toolchain:
//
//	${XDG_CACHE_HOME:-$HOME/.cache}/baton/kube/<KubernetesVersion>/
//	    src/kube/   requires k8s.io/kubernetes KubernetesVersion and replaces
//	                every k8s.io/* staging module listed in its go.mod by the
//	                matching StagingVersion release; mains for kube-apiserver
//	                and kube-controller-manager calling the upstream command
//	                constructors
//	    src/etcd/   requires go.etcd.io/etcd/server/v3 EtcdVersion; a main
//	                calling etcdmain.Main
//	    bin/        kube-apiserver, kube-controller-manager, etcd
//	    .installed  stamp, written only after all three binaries are in place
//
// The binaries are built one after the other (kube-apiserver takes about four
// minutes on two cores the first time, the other two about a minute each) with
// -trimpath, GOFLAGS=-mod=mod and GOWORK=off, and with -ldflags stamping
// k8s.io/component-base/version (gitVersion, gitMajor, gitMinor) so that the
// server's /version reports KubernetesVersion rather than v0.0.0-master.
// A build that did not finish (no stamp, or a stamp from another recipe) is
// redone; a finished one makes Install a cheap no-op. Concurrent installs from
// several processes (e.g. parallel test packages) are serialised with a file
// lock. The Go module proxy must serve the modules (GOPROXY as configured).
//
// # kubectl, helm and the node's binaries
//
// [Kubectl], [Helm], [KubeScheduler], [Kubelet] and [KubeProxy] build one
// binary each on first use, the same way, and return its path; each has its
// own stamp, so adding or rebuilding one never rebuilds another
// ([ToolInstalled] checks one without building):
//
//	.../baton/kube/<KubernetesVersion>/
//	    src/<name>/         the kube module's go.mod with a tool directive for
//	                        k8s.io/kubernetes/cmd/<name>
//	    bin/<name>          stamped like the control plane
//	    .installed-<name>   for kubectl, kube-scheduler, kubelet, kube-proxy
//	.../baton/kube/helm/<HelmVersion>/
//	    src/helm/           requires helm.sh/helm/v3 HelmVersion (the versions
//	                        of helm's own go.mod) with a tool directive for
//	                        helm.sh/helm/v3/cmd/helm
//	    bin/helm            stamped like a helm release build
//	    .installed-helm
//
// kubectl, kube-scheduler, kubelet and kube-proxy reuse most of
// kube-apiserver's packages from the Go build cache, so each takes under a
// minute after the control plane (kube-scheduler alone takes four to five
// minutes with an empty build cache); helm about a minute more. They are
// built with the go command's default CGO_ENABLED, as the control plane is:
// kubelet built with CGO_ENABLED=0 works too but shares no package with the
// control plane and takes seven minutes or more. `go run ./hack/kube
// install` builds everything (and, through internal/testing/localnode, containerd
// and the CNI plugins); `make install-deps`, which `make test` runs before
// any test binary starts, runs it (and installs Cassandra), so that no
// test's deadline includes a build.
//
// # Using the binaries in tests
//
// The directory Install returns is what envtest calls KUBEBUILDER_ASSETS.
// [StartEnv] installs and starts an envtest.Environment on it:
//
//	func TestMain(m *testing.M) {
//		ctx := context.Background()
//		env := &envtest.Environment{}
//		restCfg, err := localkube.StartEnv(ctx, localkube.Config{Progress: os.Stderr}, env)
//		// on error: fail under CI=true, otherwise skip the tests and suggest
//		// `go run ./hack/kube install`
//		code := m.Run()
//		_ = env.Stop()
//		os.Exit(code)
//	}
//
// Equivalently, set env.BinaryAssetsDirectory to the directory Install
// returns (or export KUBEBUILDER_ASSETS=$(go run ./hack/kube path)).
// envtest runs only etcd and kube-apiserver; kube-controller-manager is in the
// same directory for tests that need Deployments, ReplicaSets or
// EndpointSlices reconciled and start it themselves. envtest runs no
// kubelet; internal/testing/localnode runs a real node with the kubelet and
// kube-proxy built here.
package localkube
