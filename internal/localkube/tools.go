package localkube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/filelock"
)

const (
	// HelmVersion is the helm.sh/helm/v3 module helm is built from: the
	// newest v3 release, built on k8s.io v0.37 and Go 1.26.
	HelmVersion = "v3.22.0"

	helmModule     = "helm.sh/helm/v3"
	kubectlPackage = kubeModule + "/cmd/kubectl"
	helmPackage    = helmModule + "/cmd/helm"

	// toolRecipe changes whenever the way kubectl or helm is built changes.
	toolRecipe = "1"
)

// tool is one command built from a throwaway module into a cache directory:
//
//	dir/src/<name>/          the throwaway module
//	dir/bin/<name>           the binary
//	dir/.installed-<name>    stamp, written only after the binary is in place
//	dir/build-<name>.log     the go commands and their output
//	dir/.lock                serialises builds in dir between processes
type tool struct {
	name    string
	version string
	dir     string
	// stamp is the content of the stamp file of a complete build.
	stamp string
	// expect says how long the first build takes, for the progress line.
	expect string
	// pkg is the main package to build, a dependency of the throwaway module.
	pkg string
	// goMod returns the go.mod of the throwaway module in src.
	goMod func(ctx context.Context, b *builder, src string) (string, error)
	// ldflags returns the -ldflags, once the module in src is tidy.
	ldflags func(ctx context.Context, b *builder, src string) (string, error)
}

func (t tool) path() string      { return filepath.Join(t.dir, "bin", t.name) }
func (t tool) stampPath() string { return filepath.Join(t.dir, stampFile+"-"+t.name) }

func (t tool) installed() bool {
	b, err := os.ReadFile(t.stampPath())
	if err != nil || string(b) != t.stamp {
		return false
	}
	fi, err := os.Stat(t.path())
	return err == nil && fi.Mode().IsRegular()
}

// Kubectl returns the path of kubectl KubernetesVersion, building it on
// first use from k8s.io/kubernetes/cmd/kubectl in a throwaway module made
// like the control plane's (same staging replacements, same version stamp,
// so `kubectl version --client` reports KubernetesVersion) into the control
// plane's bin directory, where envtest also looks for it. It never builds or
// rebuilds the control plane. The first build takes under a minute once
// kube-apiserver's packages are in the Go build cache, several minutes
// otherwise. Safe to call from several processes at once.
func Kubectl(ctx context.Context, cfg Config) (path string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	return installTool(ctx, cfg, kubectlTool(cfg))
}

// Helm returns the path of helm HelmVersion, building it from
// helm.sh/helm/v3/cmd/helm on first use into
// CacheDir/helm/<HelmVersion>/bin/helm. helm is built with the versions
// its own go.mod requires and stamped like helm's release builds
// (`helm version` reports HelmVersion; without a cluster, templates see the
// Kubernetes minor version of its client-go). The first build takes one to
// two minutes on two cores. Safe to call from several processes at once.
func Helm(ctx context.Context, cfg Config) (path string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	return installTool(ctx, cfg, helmTool(cfg))
}

func kubectlTool(cfg Config) tool {
	return tool{
		name:    "kubectl",
		version: KubernetesVersion,
		dir:     cfg.versionDir(),
		stamp:   fmt.Sprintf("kubectl=%s staging=%s recipe=%s\n", KubernetesVersion, StagingVersion, toolRecipe),
		expect:  "under a minute after kube-apiserver, ~5 minutes without",
		pkg:     kubectlPackage,
		goMod: func(ctx context.Context, b *builder, src string) (string, error) {
			upstream, err := b.upstreamGoMod(ctx, src, kubeModule, KubernetesVersion)
			if err != nil {
				return "", err
			}
			return kubeGoMod(upstream, kubectlPackage)
		},
		ldflags: func(context.Context, *builder, string) (string, error) { return versionLDFlags(), nil },
	}
}

func helmTool(cfg Config) tool {
	return tool{
		name:    "helm",
		version: HelmVersion,
		dir:     filepath.Join(cfg.CacheDir, "helm", HelmVersion),
		stamp:   fmt.Sprintf("helm=%s recipe=%s\n", HelmVersion, toolRecipe),
		expect:  "1-2 minutes",
		pkg:     helmPackage,
		goMod: func(ctx context.Context, b *builder, src string) (string, error) {
			upstream, err := b.upstreamGoMod(ctx, src, helmModule, HelmVersion)
			if err != nil {
				return "", err
			}
			return helmGoMod(upstream), nil
		},
		// helm's Makefile derives the Kubernetes version that templates and
		// lint assume without a cluster from the client-go it is built with.
		ldflags: func(ctx context.Context, b *builder, src string) (string, error) {
			out, err := b.goCmd(ctx, src, "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go")
			if err != nil {
				return "", fmt.Errorf("localkube: client-go version of helm %s: %w", HelmVersion, err)
			}
			return helmLDFlags(strings.TrimSpace(string(out)))
		},
	}
}

// helmGoMod returns the go.mod of the throwaway module that builds helm: it
// requires helm at HelmVersion, with the go version helm's own go.mod says.
func helmGoMod(upstream []byte) string {
	var sb strings.Builder
	sb.WriteString("// Generated by baton's internal/localkube: builds helm from " + helmModule + " " + HelmVersion + ".\n\n")
	sb.WriteString("module baton.local/localkube/helm\n\n")
	if m := goDirectiveRE.FindSubmatch(upstream); m != nil {
		fmt.Fprintf(&sb, "go %s\n\n", m[1])
	}
	fmt.Fprintf(&sb, "require %s %s\n", helmModule, HelmVersion)
	writeTools(&sb, []string{helmPackage})
	return sb.String()
}

// helmLDFlags stamps helm's version packages the way helm's Makefile does
// for a release build; clientGo is the k8s.io/client-go version helm is
// built with (v0.37.0 means Kubernetes 1.37).
func helmLDFlags(clientGo string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(clientGo, "v"), ".")
	if len(parts) < 2 || parts[0] != "0" {
		return "", fmt.Errorf("localkube: helm %s is built with k8s.io/client-go %q, want v0.<minor>.<patch>", HelmVersion, clientGo)
	}
	flags := []string{
		"-X " + helmModule + "/internal/version.version=" + HelmVersion,
		"-X " + helmModule + "/internal/version.gitTreeState=clean",
	}
	for _, pkg := range []string{"pkg/lint/rules", "pkg/chartutil"} {
		flags = append(flags,
			fmt.Sprintf("-X %s/%s.k8sVersionMajor=1", helmModule, pkg),
			fmt.Sprintf("-X %s/%s.k8sVersionMinor=%s", helmModule, pkg, parts[1]))
	}
	return strings.Join(flags, " "), nil
}

// installTool builds t unless a complete build is in the cache, holding the
// directory's file lock while it builds.
func installTool(ctx context.Context, cfg Config, t tool) (string, error) {
	if t.installed() {
		fmt.Fprintf(cfg.Progress, "localkube: %s %s already built at %s (cache reused)\n", t.name, t.version, t.path())
		return t.path(), nil
	}
	goBin, err := exec.LookPath(cfg.GoBinary)
	if err != nil {
		return "", fmt.Errorf("localkube: go command (%s) not found; it is needed to build %s: %w", cfg.GoBinary, t.name, err)
	}
	binDir := filepath.Dir(t.path())
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("localkube: install %s: %w", t.name, err)
	}
	waitStart := time.Now()
	unlock, err := filelock.Lock(ctx, filepath.Join(t.dir, ".lock"), func() {
		fmt.Fprintf(cfg.Progress, "localkube: another process is building in %s; waiting for it...\n", t.dir)
	})
	if err != nil {
		return "", fmt.Errorf("localkube: install %s: %w", t.name, err)
	}
	defer unlock()
	if t.installed() { // another process finished while we waited
		fmt.Fprintf(cfg.Progress, "localkube: %s %s built by another process at %s (waited %s)\n", t.name, t.version, t.path(), since(waitStart))
		return t.path(), nil
	}

	_ = os.Remove(t.stampPath())
	src := filepath.Join(t.dir, "src", t.name)
	if err := os.RemoveAll(src); err != nil {
		return "", fmt.Errorf("localkube: install %s: %w", t.name, err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("localkube: install %s: %w", t.name, err)
	}
	logPath := filepath.Join(t.dir, "build-"+t.name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return "", fmt.Errorf("localkube: install %s: %w", t.name, err)
	}
	defer logFile.Close()
	b := &builder{cfg: cfg, goBin: goBin, dir: t.dir, binDir: binDir, log: logFile}

	start := time.Now()
	if err := t.build(ctx, b, src); err != nil {
		return "", fmt.Errorf("%w (build log %s)", err, logPath)
	}
	fmt.Fprintf(cfg.Progress, "localkube: %s %s ready at %s after %s\n", t.name, t.version, t.path(), since(start))
	return t.path(), nil
}

func (t tool) build(ctx context.Context, b *builder, src string) error {
	resolving := b.resolving(t.name + " " + t.version + "'s modules")
	goMod, err := t.goMod(ctx, b, src)
	if err != nil {
		return err
	}
	if err := writeFiles(src, map[string]string{"go.mod": goMod}); err != nil {
		return err
	}
	if _, err := b.goCmd(ctx, src, "mod", "tidy"); err != nil {
		return fmt.Errorf("localkube: go mod tidy of the %s build module: %w", t.name, err)
	}
	resolving()
	ldflags, err := t.ldflags(ctx, b, src)
	if err != nil {
		return err
	}
	if err := b.goBuild(ctx, src, t.name, t.pkg, ldflags, t.version, t.expect); err != nil {
		return err
	}
	return writeStamp(t.stampPath(), t.stamp)
}
