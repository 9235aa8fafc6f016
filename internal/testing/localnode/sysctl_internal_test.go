package localnode

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProcSys writes values (key: path under /proc/sys) into a directory standing in for /proc/sys.
func fakeProcSys(t *testing.T, root string, values map[string]string) {
	t.Helper()
	for key, v := range values {
		p := filepath.Join(root, key)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readSysctl(t *testing.T, root, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, key))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSysctlsRestoredToWhatTheFirstStartSaw (a directory standing in for /proc/sys): the values
// from before a node are put back after it, even when a node crashed in between and the next
// Start saw the kubelet's values; a key this kernel lacks is skipped; the saved file goes.
func TestSysctlsRestoredToWhatTheFirstStartSaw(t *testing.T) {
	root := t.TempDir()
	saved := filepath.Join(t.TempDir(), "baton-node", "sysctl.saved")
	before := map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "0", "kernel/panic_on_oops": "0"}
	fakeProcSys(t, root, before)
	keys := []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops", "net/bridge/bridge-nf-call-iptables"}

	if err := saveSysctls(root, saved, keys); err != nil {
		t.Fatal(err)
	}
	kubelet := map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "10", "kernel/panic_on_oops": "1"}
	fakeProcSys(t, root, kubelet)
	// A node that crashed: the next Start saves again before its cleanUp ran... it must keep
	// the first values, not the kubelet's.
	if err := saveSysctls(root, saved, keys); err != nil {
		t.Fatal(err)
	}
	if err := restoreSysctls(root, saved); err != nil {
		t.Fatal(err)
	}
	for key, want := range before {
		if got := readSysctl(t, root, key); got != want {
			t.Errorf("%s = %s after restore, want %s (kubelet's %s)", key, got, want, kubelet[key])
		}
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("the saved values are still at %s after restore (%v)", saved, err)
	}
	if _, err := os.Stat(filepath.Join(root, "net/bridge/bridge-nf-call-iptables")); !os.IsNotExist(err) {
		t.Errorf("restore created a key this kernel lacks: %v", err)
	}
	if err := restoreSysctls(root, saved); err != nil {
		t.Errorf("a second restore (nothing saved): %v", err)
	}
}

// TestSysctlsRestoreReportsAndForgets: a value the kernel refuses is reported, and the saved file
// is removed anyway so that it does not fail every later start.
func TestSysctlsRestoreReportsAndForgets(t *testing.T) {
	root := t.TempDir()
	saved := filepath.Join(t.TempDir(), "sysctl.saved")
	if err := os.WriteFile(saved, []byte("kernel/panic=0\nno-such/dir/key=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fakeProcSys(t, root, map[string]string{"kernel/panic": "10"})
	err := restoreSysctls(root, saved)
	if err == nil || !strings.Contains(err.Error(), "no-such/dir/key") {
		t.Errorf("restore = %v, want an error naming no-such/dir/key", err)
	}
	if got := readSysctl(t, root, "kernel/panic"); got != "0" {
		t.Errorf("kernel/panic = %s, want 0: one refused key must not stop the others", got)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("saved file still there: %v", err)
	}
}

// TestStaleSocket: a socket something listens on is not stale, one nobody listens on is, and a
// regular file or a missing path is not a socket at all.
func TestStaleSocket(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dead := filepath.Join(dir, "dead.sock")
	dl, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	dl.(*net.UnixListener).SetUnlinkOnClose(false) // as a killed process leaves it
	dl.Close()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{live: false, dead: true, file: false, filepath.Join(dir, "missing"): false} {
		if got := staleSocket(path); got != want {
			t.Errorf("staleSocket(%s) = %v, want %v", filepath.Base(path), got, want)
		}
	}
}

// TestContainerdKeepsOffSharedPaths: the node's containerd puts the pods' network namespaces
// under its state directory and runs without NRI, so that it writes nothing to /var/run/netns or
// /var/run/nri, which every containerd on the machine shares.
func TestContainerdKeepsOffSharedPaths(t *testing.T) {
	conf := string(containerdConfig("/n/containerd", "/usr/sbin/runc", "/cni/bin", "/n/cni/net.d", "pause:1"))
	section := ""
	got := map[string]string{}
	for _, line := range strings.Split(conf, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if k, v, ok := strings.Cut(line, " = "); ok {
			got[section+" "+k] = v
		}
	}
	for key, want := range map[string]string{
		`[plugins."io.containerd.nri.v1.nri"] disable`:                          "true",
		`[plugins."io.containerd.cri.v1.runtime"] netns_mounts_under_state_dir`: "true",
		` state`: `"/n/containerd/state"`,
	} {
		if got[key] != want {
			t.Errorf("%s = %q, want %q in:\n%s", key, got[key], want, conf)
		}
	}
}
