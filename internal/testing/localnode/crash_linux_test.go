package localnode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// crashChildEnv, set in the environment of this test binary, makes it the crashing run of
// TestCleanUpAfterCrash instead of running tests.
const crashChildEnv = "BATON_LOCALNODE_CRASH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		if err := crashChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0) // not reached: the parent kills this process
	}
	os.Exit(m.Run())
}

// crashChild is a run that crashes with a sandboxed node up: it makes the host's network for one
// node, the node's sandbox attached to it, and in the sandbox a process that is no child of this
// one (as a containerd shim is not: it outlives a crash and keeps the node's namespaces alive).
// It prints "ready" and waits for its parent to kill it. It takes no machine lock: the parent
// holds it.
func crashChild() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	l, err := detectCgroups(mi)
	if err != nil {
		return err
	}
	specs, err := sandboxedNodes(1)
	if err != nil {
		return err
	}
	if err := setUpHostNetwork(ctx, specs); err != nil {
		return err
	}
	s, err := newSandbox(l, strings.TrimPrefix(specs[0].CgroupRoot, "/"), specs[0].Name)
	if err != nil {
		return err
	}
	if err := s.attach(ctx, specs[0], specs); err != nil {
		return err
	}
	// The shell exits at once; its sleep is re-parented away from this process, like a shim.
	if _, err := s.run(ctx, "sh", "-c", "sleep 600 </dev/null >/dev/null 2>&1 &"); err != nil {
		return err
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
	return errors.New("not killed within an hour")
}

// TestCleanUpAfterCrash re-runs this test binary as a run that crashes (SIGKILL) with a
// sandboxed node up, its host network set up and a shim-like process alive in it: the crash
// leaves the bridge, the node's host link (its namespace held by that process), the fence chain
// and the node's cgroups, and Leftovers lists them; cleanUp, as the next Start runs it, removes
// every one, and Leftovers is empty.
func TestCleanUpAfterCrash(t *testing.T) {
	ownMachine(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"=1")
	var stderr strings.Builder
	child.Stderr = &stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line == "ready\n"
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = child.Process.Kill()
			_ = child.Wait()
			t.Fatalf("the crashing run failed before it was ready: %s", stderr.String())
		}
	case <-ctx.Done():
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("the crashing run was not ready within a minute: %s", stderr.String())
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	t.Logf("a run crashed with a node up after %s", time.Since(start).Round(time.Millisecond))

	left := Leftovers(ctx)
	for _, want := range []string{"link " + bridgeName, "link " + hostLinkPrefix + "1", "iptables chain filter/" + fenceChain} {
		if !hasLine(left, want) {
			t.Errorf("after the crash, Leftovers has no %q: %v", want, left)
		}
	}
	if !hasLine(left, "cgroup ") || !strings.Contains(strings.Join(left, "\n")+"\n", "/"+nodeCgroupPrefix+"1\n") {
		t.Errorf("after the crash, Leftovers has no cgroup %s1: %v", nodeCgroupPrefix, left)
	}
	start = time.Now()
	if err := cleanUp(ctx, ""); err != nil {
		t.Error(err)
	}
	t.Logf("cleaned up in %s", time.Since(start).Round(time.Millisecond))
	if left := Leftovers(ctx); len(left) > 0 {
		t.Errorf("after cleanUp, the crashed run left %d things on the machine:\n%s", len(left), strings.Join(left, "\n"))
	}
}

// hasLine reports whether a line of lines starts with prefix.
func hasLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
