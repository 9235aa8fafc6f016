package localnode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestPodDialer runs on this machine (root): a stand-in pod (a process in a cgroup pod<uid> below
// a sandbox's, in the sandbox's network namespace) is found by its UID; a dial from its network
// namespace reaches a listener made in that namespace, which the host cannot reach at the same
// address, and not the host's listener; the dialing process is back in its own namespace
// afterwards (the host's listener answers its next plain dial); a pod on no node is an error.
func TestPodDialer(t *testing.T) {
	l := hostCgroups(t, "namespaces and cgroups")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("baton-podtest-%d", os.Getpid())
	s, err := newSandbox(l, name, "baton-podtest")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.destroy() }()

	// The stand-in pod: joins the pod's container cgroup, then sleeps in the sandbox's namespaces.
	const uid = "0a1b2c3d-test"
	podCgroup := name + "/kubepods/besteffort/pod" + uid + "/c1"
	for _, c := range []string{"/kubepods", "/kubepods/besteffort", "/kubepods/besteffort/pod" + uid, "/kubepods/besteffort/pod" + uid + "/c1"} {
		if err := l.create(name + c); err != nil {
			t.Fatal(err)
		}
	}
	script := joinPrologue + "exec nsenter --target " + strconv.Itoa(s.pid()) + ` --net --mount --uts -- "$@"`
	pod := exec.Command("sh", append(append([]string{"-c", script, "sh"}, joinArgs(l.joinFiles(podCgroup))...), "sleep", "120")...)
	pod.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := pod.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pod.Process.Kill(); _ = pod.Wait() }()

	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go serveWord(host, "host")
	hostAddr := host.Addr().String()

	n := &Node{nodes: []*kubeNode{{spec: NodeSpec{Name: "baton-podtest"}, sb: s}}}
	if _, err := n.PodDialer("no-such-pod")(ctx, "tcp", hostAddr); err == nil {
		t.Error("a dial from a pod that is on no node succeeded")
	}
	dial := n.PodDialer(uid)
	var inPod net.Listener
	testWaitFor(t, "the stand-in pod in its cgroup", 10*time.Second, func() bool {
		pid, err := n.nodes[0].podPID(uid)
		if err != nil {
			return false
		}
		return inNetns(pid, func() error {
			var err error
			inPod, err = net.Listen("tcp", "127.0.0.1:0")
			return err
		}) == nil
	})
	defer inPod.Close()
	go serveWord(inPod, "pod")
	podAddr := inPod.Addr().String()

	if got, err := readWord(ctx, dial, podAddr); got != "pod" {
		t.Errorf("from the pod, %s answered %q, %v; want pod", podAddr, got, err)
	}
	if got, err := readWord(ctx, dial, hostAddr); err == nil {
		t.Errorf("from the pod, the host's listener %s answered %q: the dial did not leave the host's namespace", hostAddr, got)
	}
	var d net.Dialer
	if got, err := readWord(ctx, d.DialContext, hostAddr); got != "host" {
		t.Errorf("after the pod's dials, this process's dial to %s answered %q, %v; want host", hostAddr, got, err)
	}
	if got, err := readWord(ctx, d.DialContext, podAddr); err == nil && got == "pod" {
		t.Errorf("the pod's listener %s answers the host: it is not in the pod's namespace", podAddr)
	}
}

// serveWord answers every connection of l with word and a newline, until l is closed.
func serveWord(l net.Listener, word string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(word + "\n"))
		_ = c.Close()
	}
}

// readWord dials address with dial and returns the line it reads.
func readWord(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), address string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", address)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

// testWaitFor polls cond every 20 ms until it holds, failing the test after within.
func testWaitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
