package localnode_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/localnode"
)

// installTimeout bounds a first build of the node's binaries (a few minutes
// after the control plane; make test runs make install-deps first, so there
// it is a cache hit).
const installTimeout = 45 * time.Minute

// TestInstall installs the node's binaries and runs each one's version
// command. If they cannot be installed, the test fails under CI=true and is
// skipped otherwise.
func TestInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds kubelet, kube-proxy, containerd and the CNI plugins (make test runs it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cfg := localnode.Config{Progress: os.Stderr}
	bins, err := localnode.Install(ctx, cfg)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("install the node's binaries: %v", err)
		}
		t.Skipf("the node's binaries could not be installed (run `make install-deps` as root, or `go run ./hack/kube install`; under CI=true this fails the test): %v", err)
	}

	start := time.Now()
	again, err := localnode.Install(ctx, localnode.Config{})
	if err != nil || again != bins {
		t.Errorf("second Install = %+v, %v; want %+v", again, err, bins)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Install took %s, want a cache hit", d)
	}
	if got, missing, err := localnode.Installed(localnode.Config{}); err != nil || len(missing) > 0 || got != bins {
		t.Errorf("Installed() = %+v, %q, %v; want %+v, none missing, nil", got, missing, err, bins)
	}
	binDir, _, _ := localkube.Installed(localkube.Config{})
	for _, p := range []string{bins.KubeScheduler, bins.Kubelet, bins.KubeProxy} {
		if filepath.Dir(p) != binDir {
			t.Errorf("%s is not in the control plane's bin directory %s", p, binDir)
		}
	}

	version := func(path string, env []string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s %s: %v\n%s", path, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, tc := range []struct {
		name, path string
		env, args  []string
		want       string
	}{
		{"kube-scheduler", bins.KubeScheduler, nil, []string{"--version"}, "Kubernetes " + localkube.KubernetesVersion},
		{"kubelet", bins.Kubelet, nil, []string{"--version"}, "Kubernetes " + localkube.KubernetesVersion},
		{"kube-proxy", bins.KubeProxy, nil, []string{"--version"}, "Kubernetes " + localkube.KubernetesVersion},
		{"containerd", bins.Containerd, nil, []string{"--version"}, "containerd github.com/containerd/containerd/v2 " + localnode.ContainerdVersion},
		{"ctr", bins.Ctr, nil, []string{"--version"}, "ctr github.com/containerd/containerd/v2 " + localnode.ContainerdVersion},
		{"shim", filepath.Join(bins.ShimDir, localnode.ContainerdShim), nil, []string{"-v"}, "Version:  " + localnode.ContainerdVersion},
		{"runc", bins.Runc, nil, []string{"--version"}, "runc version "},
		{"iptables", bins.Iptables, nil, []string{"--version"}, "iptables v"},
		{"conntrack", bins.Conntrack, nil, []string{"--version"}, "conntrack v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out := version(tc.path, tc.env, tc.args...); !strings.Contains(out, tc.want) {
				t.Errorf("%s %v = %q, want it to contain %q", tc.path, tc.args, out, tc.want)
			}
		})
	}
	for _, plugin := range localnode.CNIPlugins {
		t.Run("cni-"+plugin, func(t *testing.T) {
			path := filepath.Join(bins.CNIBinDir, plugin)
			// The CNI VERSION command answers on stdout with the protocol
			// versions; without a command, a plugin names its build.
			if out := version(path, []string{"CNI_COMMAND=VERSION"}); !strings.Contains(out, `"supportedVersions"`) || !strings.Contains(out, `"1.0.0"`) {
				t.Errorf("CNI_COMMAND=VERSION %s = %q, want the supported versions including 1.0.0", path, out)
			}
			if out, want := version(path, nil), "CNI "+plugin+" plugin "+localnode.CNIPluginsVersion; !strings.Contains(out, want) {
				t.Errorf("%s = %q, want it to contain %q", path, out, want)
			}
		})
	}
}
