package localnode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// procSys is where the kernel's settings are (sysctl's /proc/sys); sysctlsSaved is where Start
// keeps their values from before the node, for cleanUp to put back.
const (
	procSys      = "/proc/sys"
	sysctlsSaved = "/run/baton-node/sysctl.saved"
)

// globalSysctls are the machine-wide kernel settings a node changes, as paths under /proc/sys:
// the ones the kubelet sets at start (setupKernelTunables in the kubelet's container manager:
// overcommit, panic on OOM and oops, the root user's key quota) and the ones setUpNetwork sets for
// the host's network namespace (forwarding, bridged traffic through iptables). kube-proxy changes
// none in the node's configuration (conntrack settings 0, localhostNodePorts off).
var globalSysctls = []string{
	"vm/overcommit_memory",
	"vm/panic_on_oom",
	"kernel/panic",
	"kernel/panic_on_oops",
	"kernel/keys/root_maxkeys",
	"kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward",
	"net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables",
}

// saveSysctls writes the current values of keys (paths under root) to file, one "key=value" line
// each, unless file exists already: then a node that was never stopped saved the values from
// before it, and those, not the ones it left, are what cleanUp must put back. A key that does not
// exist on this kernel is skipped.
//
// It does not know the values from before the first node that ran without saving them (before
// this existed); those are lost.
func saveSysctls(root, file string, keys []string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	var b bytes.Buffer
	for _, key := range keys {
		v, err := os.ReadFile(filepath.Join(root, key))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("localnode: saving sysctl %s: %w", key, err)
		}
		fmt.Fprintf(&b, "%s=%s\n", key, strings.TrimSpace(string(v)))
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("localnode: saving sysctls: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("localnode: saving sysctls: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("localnode: saving sysctls: %w", err)
	}
	return nil
}

// restoreSysctls writes back the values saveSysctls saved in file (paths under root) and removes
// file and its directory if empty. No file is not an error: nothing was saved, or it was restored
// already. The file is removed even when a value cannot be written back, so that a setting the
// kernel refuses does not fail every later start; the error says which.
func restoreSysctls(root, file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localnode: restoring sysctls: %w", err)
	}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "=")
		if !ok || key == "" || strings.Contains(key, "..") {
			errs = append(errs, fmt.Errorf("localnode: %s: malformed line %q", file, sc.Text()))
			continue
		}
		if err := os.WriteFile(filepath.Join(root, key), []byte(value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("localnode: restoring sysctl %s=%s: %w", key, value, err))
		}
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("localnode: %w", err))
	}
	_ = os.Remove(filepath.Dir(file)) // only if empty
	return errors.Join(errs...)
}
