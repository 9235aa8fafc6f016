package localnode

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSandboxNetworkBetweenTwoNodes joins two sandboxes, nodes 1 and 2 of sandboxedNodes(2),
// with a veth pair in their own namespaces (standing in for the host bridge, so nothing of it
// touches the host's network) and configures both: node 1 reaches a server on node 2's pod
// gateway through its route to node 2's pod subnet, and the answer comes back; forwarding is on
// in node 1's namespace only, not on the host.
func TestSandboxNetworkBetweenTwoNodes(t *testing.T) {
	l := hostCgroups(t, "namespaces and cgroups")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	specs, err := sandboxedNodes(2)
	if err != nil {
		t.Fatal(err)
	}
	hostForward, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	var boxes []*sandbox
	for i := range specs {
		s, err := newSandbox(l, fmt.Sprintf("baton-sbtest-%d-%d", os.Getpid(), i+1), specs[i].Name)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.destroy() }()
		boxes = append(boxes, s)
	}
	if _, err := boxes[0].run(ctx, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", fmt.Sprint(boxes[1].pid())); err != nil {
		t.Fatal(err)
	}
	for i, s := range boxes {
		if err := s.configureNetwork(ctx, specs[i], specs); err != nil {
			t.Fatal(err)
		}
	}

	// A server on node 2's pod gateway, listening in node 2's network namespace.
	ln, err := listenIn(fmt.Sprintf("/proc/%d/ns/net", boxes[1].pid()), net.JoinHostPort(specs[1].PodGateway, "8080"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "node 2 saw %s", r.RemoteAddr)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	out, err := boxes[0].run(ctx, "curl", "-sS", "--max-time", "5", "http://"+net.JoinHostPort(specs[1].PodGateway, "8080")+"/")
	if err != nil {
		t.Fatal(err)
	}
	if want := "node 2 saw " + specs[0].IP + ":"; !strings.HasPrefix(string(out), want) {
		t.Errorf("node 1 to node 2's pod gateway: %q, want %q...", out, want)
	}
	fwd, err := boxes[0].run(ctx, "cat", "/proc/sys/net/ipv4/ip_forward")
	if err != nil || strings.TrimSpace(string(fwd)) != "1" {
		t.Errorf("node 1's ip_forward = %q (%v), want 1", fwd, err)
	}
	if now, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); string(now) != string(hostForward) {
		t.Errorf("the host's ip_forward changed from %q to %q", hostForward, now)
	}
}

// listenIn listens on addr in the network namespace at nsPath: on a locked OS thread that joins
// the namespace, creates the socket and goes back; a socket stays in the namespace it was made in.
// If going back fails, the thread is left locked, so that it ends with the goroutine instead of
// running other goroutines in the wrong namespace.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := setns(target.Fd()); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		ln, lerr := net.Listen("tcp", addr)
		if err := setns(orig.Fd()); err != nil {
			ch <- result{err: fmt.Errorf("back to this process's network namespace: %w", err)} // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ln, lerr}
	}()
	r := <-ch
	return r.ln, r.err
}

func setns(fd uintptr) error {
	return unix.Setns(int(fd), unix.CLONE_NEWNET)
}
