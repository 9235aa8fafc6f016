package localkube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/filelock"
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
	stampFile  = ".installed"
	kubeModule = "k8s.io/kubernetes"
	etcdModule = "go.etcd.io/etcd/server/v3"
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
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return cfg, fmt.Errorf("localkube: no cache dir: %w", err)
			}
			base = filepath.Join(home, ".cache")
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
		fmt.Fprintf(cfg.Progress, "localkube: control plane built by another process in %s (waited %s)\n", binDir, since(waitStart))
		return binDir, nil
	}

	b := &builder{cfg: cfg, goBin: goBin, dir: dir, binDir: binDir}
	if err := b.build(ctx); err != nil {
		return "", err
	}
	return binDir, nil
}

type builder struct {
	cfg    Config
	goBin  string
	dir    string
	binDir string
	log    io.Writer
}

func (b *builder) build(ctx context.Context) error {
	start := time.Now()
	fmt.Fprintf(b.cfg.Progress, "localkube: building the Kubernetes %s control plane and etcd %s from Go modules into %s\n", KubernetesVersion, EtcdVersion, b.dir)
	_ = os.Remove(filepath.Join(b.dir, stampFile))
	// Only this build's own sources are redone: kubectl (see Kubectl) shares
	// the directory and keeps its own stamp.
	srcDir := filepath.Join(b.dir, "src")
	for _, d := range []string{filepath.Join(srcDir, "kube"), filepath.Join(srcDir, "etcd")} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("localkube: install: %w", err)
		}
	}
	for _, d := range []string{filepath.Join(srcDir, "kube"), filepath.Join(srcDir, "etcd"), b.binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("localkube: install: %w", err)
		}
	}
	logPath := filepath.Join(b.dir, "build.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("localkube: install: %w", err)
	}
	defer logFile.Close()
	b.log = logFile

	if err := b.buildKube(ctx, filepath.Join(srcDir, "kube")); err != nil {
		return fmt.Errorf("%w (build log %s)", err, logPath)
	}
	if err := b.buildEtcd(ctx, filepath.Join(srcDir, "etcd")); err != nil {
		return fmt.Errorf("%w (build log %s)", err, logPath)
	}

	if err := writeStamp(filepath.Join(b.dir, stampFile), stamp()); err != nil {
		return err
	}
	fmt.Fprintf(b.cfg.Progress, "localkube: control plane ready in %s after %s\n", b.binDir, since(start))
	return nil
}

// The mains follow k8s.io/kubernetes/cmd/<name>/<name>.go of the release.
const kubeMainTemplate = `// Code generated by baton's internal/localkube; DO NOT EDIT.

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

const etcdMain = `// Code generated by baton's internal/localkube; DO NOT EDIT.

package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`

func (b *builder) buildKube(ctx context.Context, src string) error {
	resolving := b.resolving(kubeModule + "@" + KubernetesVersion + " and its staging modules")
	upstream, err := b.upstreamGoMod(ctx, src, kubeModule, KubernetesVersion)
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
	if err := writeFiles(src, files); err != nil {
		return err
	}
	// Both commands are imported before tidy so that go.sum covers both.
	if _, err := b.goCmd(ctx, src, "mod", "tidy"); err != nil {
		return fmt.Errorf("localkube: go mod tidy of the kube build module: %w", err)
	}
	resolving()
	ldflags := versionLDFlags()
	// kube-controller-manager shares most packages with kube-apiserver, so it
	// is much quicker once those are in the Go build cache.
	if err := b.goBuild(ctx, src, KubeAPIServer, "./cmd/"+KubeAPIServer, ldflags, KubernetesVersion, "about 6 minutes"); err != nil {
		return err
	}
	return b.goBuild(ctx, src, KubeControllerManager, "./cmd/"+KubeControllerManager, ldflags, KubernetesVersion, "about 2 minutes")
}

func (b *builder) buildEtcd(ctx context.Context, src string) error {
	files := map[string]string{
		"go.mod":  fmt.Sprintf("module baton.local/localkube/etcd\n\nrequire %s %s\n", etcdModule, EtcdVersion),
		"main.go": etcdMain,
	}
	resolving := b.resolving(etcdModule + "@" + EtcdVersion)
	if err := writeFiles(src, files); err != nil {
		return err
	}
	if _, err := b.goCmd(ctx, src, "mod", "tidy"); err != nil {
		return fmt.Errorf("localkube: go mod tidy of the etcd build module: %w", err)
	}
	resolving()
	return b.goBuild(ctx, src, Etcd, ".", "", EtcdVersion, "under a minute")
}

// upstreamGoMod downloads module@version into the module cache and returns
// its go.mod. It first writes a minimal go.mod into src, so that the go
// command does not look for one in the parent directories.
func (b *builder) upstreamGoMod(ctx context.Context, src, module, version string) ([]byte, error) {
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module baton.local/localkube/download\n"), 0o644); err != nil {
		return nil, fmt.Errorf("localkube: install: %w", err)
	}
	out, err := b.goCmd(ctx, src, "mod", "download", "-json", module+"@"+version)
	if err != nil {
		return nil, fmt.Errorf("localkube: download %s@%s: %w", module, version, err)
	}
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("localkube: go mod download %s@%s: %w", module, version, err)
	}
	if info.Error != "" || info.GoMod == "" {
		return nil, fmt.Errorf("localkube: go mod download %s@%s: %s", module, version, info.Error)
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, fmt.Errorf("localkube: read %s go.mod: %w", module, err)
	}
	return upstream, nil
}

var stagingReplaceRE = regexp.MustCompile(`(?m)^\s*(?:replace\s+)?(k8s\.io/\S+)\s+=>\s+\./staging/`)
var goDirectiveRE = regexp.MustCompile(`(?m)^go\s+(\S+)\s*$`)

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
	sb.WriteString("// Generated by baton's internal/localkube: builds Kubernetes commands\n// from " + kubeModule + " " + KubernetesVersion + ".\n\n")
	sb.WriteString("module baton.local/localkube/kube\n\n")
	if m := goDirectiveRE.FindSubmatch(upstream); m != nil {
		fmt.Fprintf(&sb, "go %s\n\n", m[1])
	}
	fmt.Fprintf(&sb, "require %s %s\n\nreplace (\n", kubeModule, KubernetesVersion)
	for _, mod := range staging {
		fmt.Fprintf(&sb, "\t%s => %s %s\n", mod, mod, StagingVersion)
	}
	sb.WriteString(")\n")
	writeTools(&sb, tools)
	return sb.String(), nil
}

func writeTools(sb *strings.Builder, tools []string) {
	for _, t := range tools {
		fmt.Fprintf(sb, "\ntool %s\n", t)
	}
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

func (b *builder) goBuild(ctx context.Context, src, name, pkg, ldflags, version, expect string) error {
	start := time.Now()
	fmt.Fprintf(b.cfg.Progress, "localkube: building %s %s (first build on 2 cores: %s; go build prints nothing, so a line each minute says it still runs)...\n", name, version, expect)
	tmp := filepath.Join(b.binDir, name+".tmp")
	args := []string{"build", "-trimpath", "-o", tmp}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	stopHeartbeat := b.heartbeat("building "+name+" "+version, start, heartbeatEvery)
	_, err := b.goCmd(ctx, src, append(args, pkg)...)
	stopHeartbeat()
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("localkube: build %s %s: %w", name, version, err)
	}
	if err := os.Rename(tmp, filepath.Join(b.binDir, name)); err != nil {
		return fmt.Errorf("localkube: install %s: %w", name, err)
	}
	fmt.Fprintf(b.cfg.Progress, "localkube: built %s %s in %s\n", name, version, since(start))
	return nil
}

// heartbeatEvery is how often a silent build step says it is still running.
const heartbeatEvery = time.Minute

// heartbeat prints a line every interval until the returned function is
// called, so that a build slowed down by a busy machine is not taken for a
// hang. The returned function waits for the printing goroutine to end.
func (b *builder) heartbeat(what string, start time.Time, every time.Duration) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				fmt.Fprintf(b.cfg.Progress, "localkube: still %s (%s so far)\n", what, since(start))
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// goCmd runs the go command in dir and returns its stdout. Its stderr goes
// to the build log and, on failure, into the error.
func (b *builder) goCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, b.goBin, args...)
	cmd.Dir = dir
	// -mod=mod: the throwaway modules have no vendor directory and tidy may
	// need to update go.sum; GOWORK=off: a go.work above the cache must not
	// pull these modules into a workspace.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, b.log)
	fmt.Fprintf(b.log, "+ (cd %s && go %s)\n", dir, strings.Join(args, " "))
	err := cmd.Run()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("go %s: %w", args[0], ctxErr)
		}
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(stderr.String(), 30))
	}
	return stdout.Bytes(), nil
}

// writeStamp writes a stamp file atomically: it exists only with its full
// content.
func writeStamp(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("localkube: install: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("localkube: install: %w", err)
	}
	return nil
}

func writeFiles(root string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("localkube: install: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return fmt.Errorf("localkube: install: %w", err)
		}
	}
	return nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// resolving prints that the go command is about to download and resolve what
// (silent for as long as the module cache lacks it) and returns a function
// that prints how long that took.
func (b *builder) resolving(what string) (done func()) {
	start := time.Now()
	fmt.Fprintf(b.cfg.Progress, "localkube: resolving %s (go mod download and tidy print nothing; up to half a minute with an empty module cache)...\n", what)
	return func() { fmt.Fprintf(b.cfg.Progress, "localkube: resolved %s in %s\n", what, since(start)) }
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }
