package localkube

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/build/gobuild"
	"github.com/baton-dev/baton/internal/testing/filelock"
)

const (
	// KubernetesVersion is the k8s.io/kubernetes module the control plane is
	// built from (the proxy refuses v1.37.2's module zip).
	KubernetesVersion = "v1.37.1"
	// StagingVersion is the release of the k8s.io/* staging modules
	// (k8s.io/api, k8s.io/apiserver, ...) that matches KubernetesVersion.
	StagingVersion = "v0.37.1"
	// EtcdVersion is the go.etcd.io/etcd/server/v3 module etcd is built from.
	EtcdVersion = "v3.6.16"

	// recipe changes whenever the way the binaries are built changes, so
	// that a cache written by an older recipe is rebuilt.
	recipe     = "1"
	stampFile  = gobuild.StampFile
	prefix     = "localkube"
	kubeModule = "k8s.io/kubernetes"
	etcdModule = "go.etcd.io/etcd/server/v3"

	// kubeResolveExpect is how long resolving k8s.io/kubernetes' modules takes: 52 s with an
	// empty module cache on this project's 2-core machine (hack/kube install with GOMODCACHE
	// pointing at an empty directory); the first report of a slow link was 10 minutes.
	kubeResolveExpect = "about a minute with an empty module cache on a fast link, several on a slow one"
)

// Binary names in the directory Install returns.
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	Etcd                  = "etcd"
)

// Config says where the binaries are cached and how they are built. The zero
// value is usable.
type Config struct {
	// CacheDir is the root of the cache; binaries live in
	// CacheDir/<KubernetesVersion>/bin. Default:
	// ${XDG_CACHE_HOME:-$HOME/.cache}/baton/kube.
	CacheDir string
	// Progress receives one line per build step. Default: discarded.
	Progress io.Writer
	// GoBinary is the go command used to build. Default: "go" from PATH.
	GoBinary string
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.CacheDir == "" {
		base, err := os.UserCacheDir() // ${XDG_CACHE_HOME:-$HOME/.cache}
		if err != nil {
			return cfg, fmt.Errorf("localkube: no cache dir: %w", err)
		}
		cfg.CacheDir = filepath.Join(base, "baton", "kube")
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.GoBinary == "" {
		cfg.GoBinary = "go"
	}
	return cfg, nil
}

func (cfg Config) versionDir() string { return filepath.Join(cfg.CacheDir, KubernetesVersion) }

// stamp is the content of the stamp file of a complete build.
func stamp() string {
	return fmt.Sprintf("kubernetes=%s staging=%s etcd=%s recipe=%s\n", KubernetesVersion, StagingVersion, EtcdVersion, recipe)
}

// Installed reports the directory holding kube-apiserver,
// kube-controller-manager and etcd if a complete build is in the cache. It
// never builds.
func Installed(cfg Config) (binDir string, ok bool, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", false, err
	}
	dir := cfg.versionDir()
	return filepath.Join(dir, "bin"), installed(dir), nil
}

func installed(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || string(b) != stamp() {
		return false
	}
	for _, name := range []string{KubeAPIServer, KubeControllerManager, Etcd} {
		if fi, err := os.Stat(filepath.Join(dir, "bin", name)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// Install makes sure kube-apiserver and kube-controller-manager
// KubernetesVersion and etcd EtcdVersion are built in the cache and returns
// the directory holding them (usable as KUBEBUILDER_ASSETS). The first call
// builds them from Go modules, which takes several minutes; later calls only
// check the stamp file. It is safe to call from several processes at once.
// It writes one progress line when the cache already holds the binaries, and
// lines at the start and end of every build step otherwise.
func Install(ctx context.Context, cfg Config) (binDir string, err error) {
	return install(ctx, cfg, true)
}

// install is Install; reportCached says whether a cache hit gets a progress
// line (StartEnv, which installs on its way, keeps quiet about a cache hit).
func install(ctx context.Context, cfg Config, reportCached bool) (binDir string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	dir := cfg.versionDir()
	binDir = filepath.Join(dir, "bin")
	if installed(dir) {
		if reportCached {
			fmt.Fprintf(cfg.Progress, "localkube: %s, %s %s and %s %s already built in %s (cache reused)\n",
				KubeAPIServer, KubeControllerManager, KubernetesVersion, Etcd, EtcdVersion, binDir)
		}
		return binDir, nil
	}
	goBin, err := exec.LookPath(cfg.GoBinary)
	if err != nil {
		return "", fmt.Errorf("localkube: go command (%s) not found; it is needed to build the Kubernetes control plane: %w", cfg.GoBinary, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("localkube: install: %w", err)
	}
	waitStart := time.Now()
	unlock, err := filelock.Lock(ctx, filepath.Join(dir, ".lock"), func() {
		fmt.Fprintf(cfg.Progress, "localkube: another process is building in %s; waiting for it...\n", dir)
	})
	if err != nil {
		return "", fmt.Errorf("localkube: install: %w", err)
	}
	defer unlock()
	if installed(dir) { // another process finished while we waited
		fmt.Fprintf(cfg.Progress, "localkube: control plane built by another process in %s (waited %s)\n", binDir, gobuild.Since(waitStart))
		return binDir, nil
	}

	if err := build(ctx, cfg, goBin, dir, binDir); err != nil {
		return "", err
	}
	return binDir, nil
}

func build(ctx context.Context, cfg Config, goBin, dir, binDir string) error {
	start := time.Now()
	fmt.Fprintf(cfg.Progress, "localkube: building the Kubernetes %s control plane and etcd %s from Go modules into %s\n", KubernetesVersion, EtcdVersion, dir)
	_ = os.Remove(filepath.Join(dir, stampFile))
	// Only this build's own sources are redone: kubectl and the other tools
	// (see tools.go) share the directory and keep their own stamps.
	srcDir := filepath.Join(dir, "src")
	for _, d := range []string{filepath.Join(srcDir, "kube"), filepath.Join(srcDir, "etcd")} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("localkube: install: %w", err)
		}
	}
	for _, d := range []string{filepath.Join(srcDir, "kube"), filepath.Join(srcDir, "etcd"), binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("localkube: install: %w", err)
		}
	}
	logPath := filepath.Join(dir, "build.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("localkube: install: %w", err)
	}
	defer logFile.Close()
	b := &gobuild.Builder{Prefix: prefix, Progress: cfg.Progress, GoBin: goBin, Log: logFile, BinDir: binDir}

	if err := buildKube(ctx, b, filepath.Join(srcDir, "kube")); err != nil {
		return fmt.Errorf("%w (build log %s)", err, logPath)
	}
	if err := buildEtcd(ctx, b, filepath.Join(srcDir, "etcd")); err != nil {
		return fmt.Errorf("%w (build log %s)", err, logPath)
	}

	if err := b.WriteStamp(filepath.Join(dir, stampFile), stamp()); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Progress, "localkube: control plane ready in %s after %s\n", binDir, gobuild.Since(start))
	return nil
}

// The mains follow k8s.io/kubernetes/cmd/<name>/<name>.go of the release.
const kubeMainTemplate = `// Code generated by baton's internal/testing/localkube; DO NOT EDIT.

package main

import (
	"os"
	_ "time/tzdata" // time zone support (CronJob)

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric

	"k8s.io/kubernetes/cmd/%s/app"
)

func main() { os.Exit(cli.Run(app.%s())) }
`

const etcdMain = `// Code generated by baton's internal/testing/localkube; DO NOT EDIT.

package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`

func buildKube(ctx context.Context, b *gobuild.Builder, src string) error {
	err := b.Resolve(ctx, kubeModule+"@"+KubernetesVersion+" and its staging modules", kubeResolveExpect, func(ctx context.Context) error {
		upstream, err := b.UpstreamGoMod(ctx, src, kubeModule, KubernetesVersion)
		if err != nil {
			return err
		}
		goMod, err := kubeGoMod(upstream)
		if err != nil {
			return err
		}
		files := map[string]string{
			"go.mod": goMod,
			filepath.Join("cmd", KubeAPIServer, "main.go"):         fmt.Sprintf(kubeMainTemplate, KubeAPIServer, "NewAPIServerCommand"),
			filepath.Join("cmd", KubeControllerManager, "main.go"): fmt.Sprintf(kubeMainTemplate, KubeControllerManager, "NewControllerManagerCommand"),
		}
		if err := b.WriteFiles(src, files); err != nil {
			return err
		}
		// Both commands are imported before tidy so that go.sum covers both.
		if _, err := b.Go(ctx, src, "mod", "tidy"); err != nil {
			return fmt.Errorf("localkube: go mod tidy of the kube build module: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	ldflags := versionLDFlags()
	// kube-controller-manager shares most packages with kube-apiserver, so it
	// is much quicker once those are in the Go build cache.
	if err := b.GoBuild(ctx, src, gobuild.Command{Name: KubeAPIServer, Pkg: "./cmd/" + KubeAPIServer, LDFlags: ldflags, Version: KubernetesVersion, Expect: "about 6 minutes"}); err != nil {
		return err
	}
	return b.GoBuild(ctx, src, gobuild.Command{Name: KubeControllerManager, Pkg: "./cmd/" + KubeControllerManager, LDFlags: ldflags, Version: KubernetesVersion, Expect: "about 2 minutes"})
}

func buildEtcd(ctx context.Context, b *gobuild.Builder, src string) error {
	files := map[string]string{
		"go.mod":  fmt.Sprintf("module baton.local/localkube/etcd\n\nrequire %s %s\n", etcdModule, EtcdVersion),
		"main.go": etcdMain,
	}
	err := b.Resolve(ctx, etcdModule+"@"+EtcdVersion, "", func(ctx context.Context) error {
		if err := b.WriteFiles(src, files); err != nil {
			return err
		}
		if _, err := b.Go(ctx, src, "mod", "tidy"); err != nil {
			return fmt.Errorf("localkube: go mod tidy of the etcd build module: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.GoBuild(ctx, src, gobuild.Command{Name: Etcd, Pkg: ".", Version: EtcdVersion, Expect: "under a minute"})
}

var stagingReplaceRE = regexp.MustCompile(`(?m)^\s*(?:replace\s+)?(k8s\.io/\S+)\s+=>\s+\./staging/`)

// kubeGoMod returns the go.mod of the throwaway module that builds the kube
// commands: it requires k8s.io/kubernetes and replaces each staging module
// that k8s.io/kubernetes' own go.mod replaces by ./staging/src/... with the
// published StagingVersion release (module replacements of a dependency are
// ignored by the go command, so they must be repeated here). Each of tools
// (a main package of a dependency, e.g. k8s.io/kubernetes/cmd/kubectl) gets
// a tool directive, so that go mod tidy covers its imports and go build can
// build it by its import path.
func kubeGoMod(upstream []byte, tools ...string) (string, error) {
	var staging []string
	for _, m := range stagingReplaceRE.FindAllSubmatch(upstream, -1) {
		staging = append(staging, string(m[1]))
	}
	if len(staging) == 0 {
		return "", fmt.Errorf("localkube: no ./staging replace directives found in %s@%s's go.mod", kubeModule, KubernetesVersion)
	}
	slices.Sort(staging)
	staging = slices.Compact(staging)
	var sb strings.Builder
	sb.WriteString("// Generated by baton's internal/testing/localkube: builds Kubernetes commands\n// from " + kubeModule + " " + KubernetesVersion + ".\n\n")
	sb.WriteString("module baton.local/localkube/kube\n\n")
	if v := gobuild.GoDirective(upstream); v != "" {
		fmt.Fprintf(&sb, "go %s\n\n", v)
	}
	fmt.Fprintf(&sb, "require %s %s\n\nreplace (\n", kubeModule, KubernetesVersion)
	for _, mod := range staging {
		fmt.Fprintf(&sb, "\t%s => %s %s\n", mod, mod, StagingVersion)
	}
	sb.WriteString(")\n")
	gobuild.WriteTools(&sb, tools)
	return sb.String(), nil
}

// versionLDFlags stamps the version packages the way kubernetes'
// hack/lib/version.sh does, so /version does not answer v0.0.0-master.
func versionLDFlags() string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range [][2]string{{"gitVersion", KubernetesVersion}, {"gitMajor", major}, {"gitMinor", minor}, {"gitTreeState", "clean"}} {
			flags = append(flags, fmt.Sprintf("-X %s.%s=%s", pkg, kv[0], kv[1]))
		}
	}
	return strings.Join(flags, " ")
}
