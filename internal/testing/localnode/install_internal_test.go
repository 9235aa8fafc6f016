package localnode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestContainerdGoMod(t *testing.T) {
	got := containerdGoMod([]byte("module github.com/containerd/containerd/v2\n\ngo 1.26.6\n\nrequire k8s.io/cri-api v0.37.0\n"))
	for _, want := range []string{
		"\nmodule baton.local/localnode/containerd\n",
		"\ngo 1.26.6\n",
		"\nrequire github.com/containerd/containerd/v2 " + ContainerdVersion + "\n",
		"\ntool github.com/containerd/containerd/v2/cmd/containerd\n",
		"\ntool github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2\n",
		"\ntool github.com/containerd/containerd/v2/cmd/ctr\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
}

func TestCNIGoMod(t *testing.T) {
	got := cniGoMod([]byte("module github.com/containernetworking/plugins\n\ngo 1.24.2\n"))
	for _, want := range []string{
		"\nmodule baton.local/localnode/cni-plugins\n",
		"\ngo 1.24.2\n",
		"\nrequire github.com/containernetworking/plugins " + CNIPluginsVersion + "\n",
		"\ntool github.com/containernetworking/plugins/plugins/main/bridge\n",
		"\ntool github.com/containernetworking/plugins/plugins/ipam/host-local\n",
		"\ntool github.com/containernetworking/plugins/plugins/main/loopback\n",
		"\ntool github.com/containernetworking/plugins/plugins/meta/portmap\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
}

func TestContainerdTool(t *testing.T) {
	tool := containerdTool(Config{CacheDir: "/cache"})
	if want := "/cache/containerd/" + ContainerdVersion + "/bin"; tool.BinDir() != want {
		t.Errorf("bin dir %s, want %s", tool.BinDir(), want)
	}
	if want := "containerd=" + ContainerdVersion + " recipe=" + installRecipe + "\n"; tool.Stamp != want {
		t.Errorf("stamp %q, want %q", tool.Stamp, want)
	}
	var names []string
	for _, c := range tool.Commands {
		names = append(names, c.Name)
		tags := strings.Join(c.Tags, ",")
		for _, want := range []string{"no_btrfs", "no_devmapper", "no_zfs", "urfave_cli_no_docs"} {
			if !strings.Contains(tags, want) {
				t.Errorf("%s built with tags %s, want %s among them", c.Name, tags, want)
			}
		}
		if got := strings.Contains(tags, "no_grpc"); got != (c.Name == ContainerdShim) {
			t.Errorf("%s built with tags %s: no_grpc is for the shim alone", c.Name, tags)
		}
	}
	if got, want := strings.Join(names, " "), "containerd containerd-shim-runc-v2 ctr"; got != want {
		t.Errorf("commands %s, want %s", got, want)
	}
	if got := strings.Join(tool.Env, " "); got != "CGO_ENABLED=0" {
		t.Errorf("env %q, want CGO_ENABLED=0", got)
	}
	for _, want := range []string{
		"-X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion,
		"-X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2",
	} {
		if !strings.Contains(containerdLDFlags(), want) {
			t.Errorf("ldflags %q lack %q", containerdLDFlags(), want)
		}
	}
}

func TestCNITool(t *testing.T) {
	tool := cniTool(Config{CacheDir: "/cache"})
	if want := "/cache/cni/" + CNIPluginsVersion + "/bin"; tool.BinDir() != want {
		t.Errorf("bin dir %s, want %s", tool.BinDir(), want)
	}
	if want := "cni-plugins=" + CNIPluginsVersion + " plugins=bridge,host-local,loopback,portmap recipe=" + installRecipe + "\n"; tool.Stamp != want {
		t.Errorf("stamp %q, want %q", tool.Stamp, want)
	}
	if len(tool.Commands) != len(CNIPlugins) {
		t.Fatalf("%d commands, want one per plugin (%d)", len(tool.Commands), len(CNIPlugins))
	}
}

func TestAptListsMissing(t *testing.T) {
	for out, want := range map[string]bool{
		"E: Unable to locate package conntrack\n":                        true,
		"E: Package 'runc' has no installation candidate\n":              true,
		"E: Failed to fetch http://deb.debian.org/...  404  Not Found\n": true,
		"E: Could not get lock /var/lib/dpkg/lock-frontend\n":            false,
		"": false,
	} {
		if got := aptListsMissing([]byte(out)); got != want {
			t.Errorf("aptListsMissing(%q) = %v, want %v", out, got, want)
		}
	}
}

func TestLookHostCommand(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "baton-test-command")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got, err := lookHostCommand("baton-test-command"); err != nil || got != exe {
		t.Errorf("lookHostCommand in PATH = %q, %v; want %q", got, err, exe)
	}
	if _, err := lookHostCommand("baton-no-such-command"); err == nil || !strings.Contains(err.Error(), "not found in PATH or /usr/local/sbin") {
		t.Errorf("lookHostCommand of a missing command: err = %v", err)
	}
}

// TestInstallPackagesCannot: without root, or without apt-get, missing
// commands are an ErrMissingPackages that says what to install and how.
func TestInstallPackagesCannot(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	saved := sbinDirs
	sbinDirs = nil
	defer func() { sbinDirs, geteuid, aptGetCommand = saved, os.Geteuid, "apt-get" }()
	cfg, err := Config{CacheDir: t.TempDir()}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}

	geteuid = func() int { return 1000 }
	_, err = installPackages(context.Background(), cfg)
	if !errors.Is(err, ErrMissingPackages) || !strings.Contains(err.Error(), "sudo apt-get install -y --no-install-recommends runc iptables conntrack") {
		t.Errorf("not root: err = %v, want ErrMissingPackages with the apt-get command", err)
	}

	geteuid = func() int { return 0 }
	aptGetCommand = "baton-no-such-apt-get"
	_, err = installPackages(context.Background(), cfg)
	if !errors.Is(err, ErrMissingPackages) || !strings.Contains(err.Error(), "apt-get is not here") {
		t.Errorf("no apt-get: err = %v, want ErrMissingPackages saying apt-get is missing", err)
	}
}
