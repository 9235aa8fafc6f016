// Package testing holds nothing but this map: the directories below it are baton's test rigs,
// the real components and fakes that tests, benchmarks and `make demo` run against. None of it
// ships: `make check` fails when a package under cmd/ depends on internal/testing or test/.
//
// # Cluster layers: which to use for what
//
// Each layer builds on the ones above it. Pick the lowest one that gives your test what it
// claims; every layer below localcassandra costs more to start (seconds to minutes) and holds a
// machine-wide resource.
//
//	layer           what it runs                                      use it for
//	--------------  ------------------------------------------------  -----------------------------------------
//	localcassandra  real Cassandra 5.0 nodes on the JVM, no Docker     a tool or demo that needs Cassandra
//	                (install from Maven Central, start, stop)         outside a test binary (hack/cassandra,
//	                                                                  hack/demo-lock)
//	localkube       real kube-apiserver, kube-controller-manager,     building the control plane and the tools
//	                etcd, kubectl, helm built from Go modules; starts  (hack/kube install); tests rarely call it
//	                envtest against them                              directly: use testenv.Kube
//	localnode       real nodes (1 to 3, each in a sandbox of its      what batonnode and testenv.Node build on
//	                own): localkube's control plane plus containerd,
//	                runc, CNI, kubelet, kube-proxy per node (root)
//	testenv         the test binary's shared components, started      any test against real Cassandra
//	                once on first use and stopped by TestMain:        (NewCassandra), a real API server with
//	                Cassandra, Kube (envtest, CRDs), Node; plus       baton's CRDs (NewKubeWithCRDs), a real
//	                WaitFor, SyncBuffer, Proxy, kubectl/helm paths;   node (NewNode); fails under CI=true and
//	                skips under -short or without the component       skips elsewhere when one cannot start
//	nodeagent       a stand-in kubelet for an API server with no      running injected pods' sidecars as local
//	                nodes: runs each injected pod's sidecar as a      processes where there is no node
//	                local process and reports the pod's status
//	devcluster      the operator as the chart runs it (own service    operator tests and make demo's
//	                account, RBAC, policies, webhook) on a            -node-agent path: the operator and
//	                localkube API server, with a nodeagent            sidecars without a kubelet
//	batonnode       localnode with baton's images imported, the       end-to-end tests (test/e2e) and make
//	                chart installed with helm and the demo workload   demo: baton exactly as users run it
//
// # The other rigs
//
//	cutstore        a lock.Store that can be cut off, as if its process lost the network
//	fakesidecar     an in-memory sidecar served by the real API handler, for tests of its clients
//	fencedstore     an HTTP resource that accepts writes by fencing token, for counting what fencing stopped
//	filelock        an advisory file lock that serialises installs between processes
//	freeport        local ports reserved by file lock, unique across processes (tests: testenv.FreePort)
//	localhint       a lock.Hinter for Lockers in one process
//	manifests       Kubernetes YAML (generated RBAC, shipped policies) read into typed objects
//	testclock       clocks for tests of lease timing
//	testpki         a throwaway CA and the certificates it signs
//	images/demoapp  the demo app of the demos and end-to-end tests (its main is hack/demoapp)
//	images/pause    the pod sandbox's pause process (its main is hack/pause)
//
// Suites that are not one package's tests live in test/: test/e2e (the real node), test/sidecar
// (sidecar processes against Cassandra and an API server), test/chaos and test/bench.
//
// What this package does not guarantee: the layer table is a guide, not a dependency rule; the
// only rule enforced is that product binaries never import anything here.
package testing
