package localnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/build/gobuild"
	"github.com/baton-dev/baton/internal/testing/filelock"
	"github.com/baton-dev/baton/internal/testing/localkube"
)

const (
	// ContainerdVersion is the github.com/containerd/containerd/v2 module
	// containerd, its runc shim and ctr are built from: the newest v2
	// release, built on the k8s.io v0.37 modules (CRI of Kubernetes 1.37)
	// and Go 1.26.
	ContainerdVersion = "v2.4.2"
	// CNIPluginsVersion is the github.com/containernetworking/plugins
	// module the CNI plugins are built from.
	CNIPluginsVersion = "v1.9.1"

	containerdModule = "github.com/containerd/containerd/v2"
	cniModule        = "github.com/containernetworking/plugins"

	// installRecipe changes whenever the way containerd or the CNI plugins
	// are built changes, so that a cache written by an older recipe is
	// rebuilt.
	installRecipe = "1"
	prefix        = "localnode"
)

// Names of the containerd binaries.
const (
	Containerd     = "containerd"
	ContainerdShim = "containerd-shim-runc-v2"
	Ctr            = "ctr"
)

// CNIPlugins are the CNI plugins built into Binaries.CNIBinDir: the pod
// network is a bridge with host-local addresses, loopback in every pod and
// portmap for hostPort.
var CNIPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// Config says where the node's binaries are cached and how they are built.
// The zero value is usable.
type Config struct {
	// CacheDir is the root of the cache of containerd and the CNI plugins
	// (see the package documentation for the layout). Default:
	// ${XDG_CACHE_HOME:-$HOME/.cache}/baton/node.
	CacheDir string
	// KubeCacheDir is localkube's cache, where kubelet and kube-proxy are
	// built next to the control plane. Default: localkube's default.
	KubeCacheDir string
	// Progress receives one line per step. Default: discarded.
	Progress io.Writer
	// GoBinary is the go command used to build. Default: "go" from PATH.
	GoBinary string
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.CacheDir == "" {
		base, err := os.UserCacheDir() // ${XDG_CACHE_HOME:-$HOME/.cache}
		if err != nil {
			return cfg, fmt.Errorf("localnode: no cache dir: %w", err)
		}
		cfg.CacheDir = filepath.Join(base, "baton", "node")
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.GoBinary == "" {
		cfg.GoBinary = "go"
	}
	return cfg, nil
}

func (cfg Config) kube() localkube.Config {
	return localkube.Config{CacheDir: cfg.KubeCacheDir, Progress: cfg.Progress, GoBinary: cfg.GoBinary}
}

// Binaries are the paths of everything a node runs.
type Binaries struct {
	// KubeScheduler, Kubelet and KubeProxy are localkube.KubernetesVersion,
	// in the control plane's bin directory (see localkube.Install for etcd,
	// kube-apiserver and kube-controller-manager). envtest does not run a
	// scheduler; a node needs one to get pods.
	KubeScheduler string
	Kubelet       string
	KubeProxy     string
	// Containerd and Ctr are ContainerdVersion.
	Containerd string
	Ctr        string
	// ShimDir holds containerd-shim-runc-v2, which containerd looks for in
	// its PATH (and next to its own binary, which ShimDir is).
	ShimDir string
	// CNIBinDir holds the CNIPlugins (containerd's CNI bin_dirs).
	CNIBinDir string
	// Runc, Iptables and Conntrack are the host's, from Debian packages.
	Runc      string
	Iptables  string
	Conntrack string
}

// ErrMissingPackages is returned (wrapped, with what is missing and how to
// install it) when runc, iptables or conntrack is missing and cannot be
// installed here: not root, or no apt-get.
var ErrMissingPackages = errors.New("localnode: host packages missing")

// Install makes sure everything a node runs is present and returns the
// paths: kube-scheduler, kubelet and kube-proxy (localkube.KubeScheduler,
// localkube.Kubelet and localkube.KubeProxy), containerd, its runc shim and
// ctr, and the CNI plugins, each built from Go modules into the cache on
// first use; and runc, iptables and conntrack, installed with apt-get when
// they are missing and this process is root.
// Later calls only check stamps and PATH. It is safe to call from several
// processes at once. Every build step prints progress lines, a cache hit one
// line. On a machine that cannot have the packages (not root, no apt-get) it
// builds everything else and returns the Binaries built so far with an error
// wrapping ErrMissingPackages.
func Install(ctx context.Context, cfg Config) (Binaries, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Binaries{}, err
	}
	var bins Binaries
	if bins.KubeScheduler, err = localkube.KubeScheduler(ctx, cfg.kube()); err != nil {
		return bins, err
	}
	if bins.Kubelet, err = localkube.Kubelet(ctx, cfg.kube()); err != nil {
		return bins, err
	}
	if bins.KubeProxy, err = localkube.KubeProxy(ctx, cfg.kube()); err != nil {
		return bins, err
	}
	opts := gobuild.Options{Prefix: prefix, Progress: cfg.Progress, GoBinary: cfg.GoBinary}
	ctrd := containerdTool(cfg)
	if _, err := gobuild.Install(ctx, opts, ctrd); err != nil {
		return bins, err
	}
	bins.Containerd, bins.Ctr, bins.ShimDir = ctrd.Path(Containerd), ctrd.Path(Ctr), ctrd.BinDir()
	if bins.CNIBinDir, err = gobuild.Install(ctx, opts, cniTool(cfg)); err != nil {
		return bins, err
	}
	paths, err := installPackages(ctx, cfg)
	if err != nil {
		return bins, err
	}
	for _, hc := range hostCommands {
		*hc.field(&bins) = paths[hc.command]
	}
	return bins, nil
}

// Installed returns the Binaries if everything Install provides is present:
// complete builds in the caches and the host commands found. It never
// builds or installs anything. missing names what is not there.
func Installed(cfg Config) (bins Binaries, missing []string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return Binaries{}, nil, err
	}
	for _, kt := range []struct {
		name string
		path *string
	}{{"kube-scheduler", &bins.KubeScheduler}, {"kubelet", &bins.Kubelet}, {"kube-proxy", &bins.KubeProxy}} {
		var ok bool
		if *kt.path, ok, err = localkube.ToolInstalled(cfg.kube(), kt.name); err != nil {
			return Binaries{}, nil, err
		} else if !ok {
			missing = append(missing, kt.name)
		}
	}
	ctrd, cni := containerdTool(cfg), cniTool(cfg)
	bins.Containerd, bins.Ctr, bins.ShimDir, bins.CNIBinDir = ctrd.Path(Containerd), ctrd.Path(Ctr), ctrd.BinDir(), cni.BinDir()
	if !ctrd.Installed() {
		missing = append(missing, Containerd+" "+ContainerdVersion)
	}
	if !cni.Installed() {
		missing = append(missing, "CNI plugins "+CNIPluginsVersion)
	}
	for _, hc := range hostCommands {
		p, err := lookHostCommand(hc.command)
		if err != nil {
			missing = append(missing, hc.command+" (Debian package "+hc.pkg+")")
		}
		*hc.field(&bins) = p
	}
	return bins, missing, nil
}

// containerdTool builds containerd, its runc shim and ctr without cgo (as
// containerd's static release does; the shim is always built so), with the
// build tags of containerd's Makefile and without the snapshotters a node
// on overlayfs does not need (btrfs needs cgo anyway). The version package
// is stamped as the Makefile does, so `containerd --version` reports
// ContainerdVersion.
func containerdTool(cfg Config) gobuild.Tool {
	cmds := []string{Containerd, ContainerdShim, Ctr}
	tags := []string{"urfave_cli_no_docs", "osusergo", "netgo", "static_build", "no_btrfs", "no_devmapper", "no_zfs"}
	t := gobuild.Tool{
		Name:    Containerd,
		Version: ContainerdVersion,
		Dir:     filepath.Join(cfg.CacheDir, "containerd", ContainerdVersion),
		Stamp:   fmt.Sprintf("containerd=%s recipe=%s\n", ContainerdVersion, installRecipe),
		Env:     []string{"CGO_ENABLED=0"},
		GoMod: func(ctx context.Context, b *gobuild.Builder, src string) (string, error) {
			upstream, err := b.UpstreamGoMod(ctx, src, containerdModule, ContainerdVersion)
			if err != nil {
				return "", err
			}
			return containerdGoMod(upstream), nil
		},
		LDFlags: func(context.Context, *gobuild.Builder, string) (string, error) { return containerdLDFlags(), nil },
	}
	for _, name := range cmds {
		c := gobuild.Command{Name: name, Pkg: containerdModule + "/cmd/" + name, Tags: tags}
		switch name {
		case Containerd:
			c.Expect = "1-2 minutes"
		case ContainerdShim:
			// As containerd's Makefile builds the shim: no gRPC server.
			c.Tags, c.Expect = append(tags[:len(tags):len(tags)], "no_grpc"), "under a minute after containerd"
		default:
			c.Expect = "under a minute after containerd"
		}
		t.Commands = append(t.Commands, c)
	}
	return t
}

func containerdGoMod(upstream []byte) string {
	var tools []string
	for _, name := range []string{Containerd, ContainerdShim, Ctr} {
		tools = append(tools, containerdModule+"/cmd/"+name)
	}
	return gobuild.RequireGoMod("// Generated by baton's internal/testing/localnode: builds containerd from "+containerdModule+" "+ContainerdVersion+".",
		"baton.local/localnode/containerd", upstream, containerdModule, ContainerdVersion, tools...)
}

// containerdLDFlags stamps containerd's version package like its Makefile
// (the revision, a git commit there, is left empty) and strips the
// binaries like a release build.
func containerdLDFlags() string {
	return fmt.Sprintf("-s -w -X %[1]s/version.Version=%[2]s -X %[1]s/version.Package=%[1]s", containerdModule, ContainerdVersion)
}

// cniTool builds the CNIPlugins without cgo, stamped like the plugins'
// release script, so that each reports CNIPluginsVersion.
func cniTool(cfg Config) gobuild.Tool {
	t := gobuild.Tool{
		Name:    "cni-plugins",
		Version: CNIPluginsVersion,
		Dir:     filepath.Join(cfg.CacheDir, "cni", CNIPluginsVersion),
		Stamp:   fmt.Sprintf("cni-plugins=%s plugins=%s recipe=%s\n", CNIPluginsVersion, strings.Join(CNIPlugins, ","), installRecipe),
		Env:     []string{"CGO_ENABLED=0"},
		GoMod: func(ctx context.Context, b *gobuild.Builder, src string) (string, error) {
			upstream, err := b.UpstreamGoMod(ctx, src, cniModule, CNIPluginsVersion)
			if err != nil {
				return "", err
			}
			return cniGoMod(upstream), nil
		},
		LDFlags: func(context.Context, *gobuild.Builder, string) (string, error) {
			return "-X " + cniModule + "/pkg/utils/buildversion.BuildVersion=" + CNIPluginsVersion, nil
		},
	}
	for _, name := range CNIPlugins {
		t.Commands = append(t.Commands, gobuild.Command{Name: name, Pkg: cniPluginPackage(name), Expect: "under half a minute"})
	}
	return t
}

func cniPluginPackage(name string) string {
	dir := "main"
	switch name {
	case "host-local", "dhcp", "static":
		dir = "ipam"
	case "portmap", "bandwidth", "firewall", "tuning", "sbr", "vrf":
		dir = "meta"
	}
	return cniModule + "/plugins/" + dir + "/" + name
}

func cniGoMod(upstream []byte) string {
	var tools []string
	for _, name := range CNIPlugins {
		tools = append(tools, cniPluginPackage(name))
	}
	return gobuild.RequireGoMod("// Generated by baton's internal/testing/localnode: builds CNI plugins from "+cniModule+" "+CNIPluginsVersion+".",
		"baton.local/localnode/cni-plugins", upstream, cniModule, CNIPluginsVersion, tools...)
}

// hostCommands are the commands a node needs from the host, and the Debian
// packages that have them: runc runs the containers, kube-proxy programs
// iptables and clears conntrack entries.
var hostCommands = []struct {
	command, pkg string
	field        func(*Binaries) *string
}{
	{"runc", "runc", func(b *Binaries) *string { return &b.Runc }},
	{"iptables", "iptables", func(b *Binaries) *string { return &b.Iptables }},
	{"conntrack", "conntrack", func(b *Binaries) *string { return &b.Conntrack }},
}

// Seams for tests.
var (
	geteuid       = os.Geteuid
	aptGetCommand = "apt-get"
)

// sbinDirs are looked in after PATH: the packages install into /usr/sbin,
// which is not in every user's PATH.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin"}

func lookHostCommand(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	for _, dir := range sbinDirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("localnode: %s not found in PATH or %s", name, strings.Join(sbinDirs, ", "))
}

// missingHostCommands returns the paths of the host commands found and the
// Debian packages of those that are not.
func missingHostCommands() (paths map[string]string, pkgs []string) {
	paths = map[string]string{}
	for _, hc := range hostCommands {
		if p, err := lookHostCommand(hc.command); err == nil {
			paths[hc.command] = p
		} else {
			pkgs = append(pkgs, hc.pkg)
		}
	}
	return paths, pkgs
}

// aptLockTimeout bounds waiting for another apt-get or dpkg (e.g.
// unattended upgrades) to release the package database.
const aptLockTimeout = 5 * time.Minute

// installPackages returns the paths of the hostCommands, installing the
// Debian packages of the missing ones with apt-get if this process is root.
func installPackages(ctx context.Context, cfg Config) (map[string]string, error) {
	paths, pkgs := missingHostCommands()
	if len(pkgs) == 0 {
		fmt.Fprintf(cfg.Progress, "localnode: runc, iptables and conntrack found at %s, %s, %s\n", paths["runc"], paths["iptables"], paths["conntrack"])
		return paths, nil
	}
	list := strings.Join(pkgs, " ")
	if geteuid() != 0 {
		return paths, fmt.Errorf("%w: the node needs the Debian packages %s, and only root can install them; run `sudo apt-get install -y --no-install-recommends %s` (or your distribution's packages with the commands %s), then `make install-deps` again",
			ErrMissingPackages, list, list, list)
	}
	aptGet, err := exec.LookPath(aptGetCommand)
	if err != nil {
		return paths, fmt.Errorf("%w: the node needs the commands of the Debian packages %s, and apt-get is not here to install them; install them with this system's package manager", ErrMissingPackages, list)
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return paths, fmt.Errorf("localnode: install packages: %w", err)
	}
	unlock, err := filelock.Lock(ctx, filepath.Join(cfg.CacheDir, ".apt.lock"), func() {
		fmt.Fprintf(cfg.Progress, "localnode: another process is installing Debian packages; waiting for it...\n")
	})
	if err != nil {
		return paths, fmt.Errorf("localnode: install packages: %w", err)
	}
	defer unlock()
	if paths, pkgs = missingHostCommands(); len(pkgs) == 0 { // installed while we waited
		return paths, nil
	}
	list = strings.Join(pkgs, " ")
	logPath := filepath.Join(cfg.CacheDir, "apt.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return paths, fmt.Errorf("localnode: install packages: %w", err)
	}
	defer logFile.Close()

	err = gobuild.Step{
		Prefix:   prefix,
		What:     "installing the Debian packages " + list + " with apt-get",
		Expect:   "log " + logPath,
		Hint:     "check that the package mirrors in /etc/apt/sources.list* can be reached, and see " + logPath,
		Progress: cfg.Progress,
		Timeout:  aptTimeout,
	}.Run(ctx, func(ctx context.Context) error { return aptInstall(ctx, cfg.Progress, aptGet, logFile, pkgs) })
	if err != nil {
		return paths, fmt.Errorf("localnode: %w", err)
	}
	if paths, pkgs = missingHostCommands(); len(pkgs) > 0 {
		return paths, fmt.Errorf("localnode: apt-get installed %s, but their commands are still not found in PATH or %s (log %s)", list, strings.Join(sbinDirs, ", "), logPath)
	}
	return paths, nil
}

// aptTimeout bounds one attempt at installing the packages (apt-get update included): beyond
// aptLockTimeout waiting for another apt-get, a few megabytes to download.
const aptTimeout = aptLockTimeout + 5*time.Minute

// aptInstall installs pkgs with apt-get, first updating the package lists if apt-get knows none
// of them (a fresh container has no lists), logging to log.
func aptInstall(ctx context.Context, progress io.Writer, aptGet string, log io.Writer, pkgs []string) error {
	list := strings.Join(pkgs, " ")
	install := append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)
	out, err := runAptGet(ctx, aptGet, log, install...)
	if err != nil && aptListsMissing(out) {
		fmt.Fprintf(progress, "localnode: apt-get knows no %s yet; running apt-get update first\n", list)
		if _, err := runAptGet(ctx, aptGet, log, "update"); err != nil {
			return fmt.Errorf("apt-get update: %w", err)
		}
		out, err = runAptGet(ctx, aptGet, log, install...)
	}
	if err != nil {
		return fmt.Errorf("apt-get install %s: %w\n%s", list, err, strings.TrimSuffix(lastLines(out, 10), "\n"))
	}
	return nil
}

// runAptGet runs apt-get non-interactively, waiting for the package
// database lock, and returns its combined output, which also goes to log.
func runAptGet(ctx context.Context, aptGet string, log io.Writer, args ...string) ([]byte, error) {
	args = append([]string{"-o", fmt.Sprintf("DPkg::Lock::Timeout=%d", int(aptLockTimeout.Seconds()))}, args...)
	cmd := exec.CommandContext(ctx, aptGet, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, log)
	cmd.Stderr = cmd.Stdout
	fmt.Fprintf(log, "+ DEBIAN_FRONTEND=noninteractive apt-get %s\n", strings.Join(args, " "))
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return out.Bytes(), err
}

// aptListsMissing reports whether apt-get's output says it failed for want
// of package lists (a fresh container has none): apt-get update helps then.
func aptListsMissing(out []byte) bool {
	for _, s := range []string{"Unable to locate package", "has no installation candidate", "Failed to fetch", "404  Not Found"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := strings.Join(lines, "\n")
	if s != "" {
		s += "\n"
	}
	return s
}
