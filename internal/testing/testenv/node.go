package testenv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/batonnode"
	"github.com/baton-dev/baton/internal/testing/localnode"
)

// nodeStartTimeout bounds starting an installed node (about 15 seconds here).
const nodeStartTimeout = 3 * time.Minute

// Node is a real single-node cluster (localnode: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd with runc and CNI, the kubelet and kube-proxy) with baton's images
// imported, shared by the tests of one binary and started on first use. One node runs on a
// machine at a time; a second test binary that asks for one waits for the first to stop.
type Node struct {
	once   sync.Once
	node   *localnode.Node
	images imagebuild.Result
	err    error
}

// NewNode describes the node; nothing starts until a test asks for it.
func NewNode() *Node { return &Node{} }

// Get returns the running node, starting it on first use. It fails the test under CI when the
// node cannot start (this machine lacks root, a kernel feature or a binary), and skips it
// elsewhere with the reason.
func (n *Node) Get(t testing.TB) *localnode.Node {
	t.Helper()
	SkipShort(t, "a real node (kubelet, containerd, runc, kube-proxy)")
	n.once.Do(func() { n.node, n.images, n.err = startNode() })
	if n.err != nil {
		msg := fmt.Sprintf("real node: %v\nIts binaries are built from Go modules and Debian packages; make test installs "+
			"them before the tests (make install-deps, or go run ./hack/kube install). It needs root.", n.err)
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return n.node
}

// Started reports whether a test started the node and it came up. Call it from TestMain after
// m.Run, like Stop.
func (n *Node) Started() bool { return n.node != nil }

// Stop stops the node if it was started and removes what it left on the machine. Call it from
// TestMain after m.Run.
func (n *Node) Stop() {
	if n.node != nil {
		n.node.Stop()
	}
}

// startNode installs (normally cache hits), builds the images and starts the node, each step
// with a bound of its own.
func startNode() (*localnode.Node, imagebuild.Result, error) {
	return batonnode.Start(context.Background(), batonnode.StartOptions{
		Progress: os.Stderr, InstallTimeout: InstallTimeout, StartTimeout: nodeStartTimeout})
}
