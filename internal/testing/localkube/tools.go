package localkube

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/baton-dev/baton/internal/build/gobuild"
)

const (
	// HelmVersion is the helm.sh/helm/v3 module helm is built from: the
	// newest v3 release, built on k8s.io v0.37 and Go 1.26.
	HelmVersion = "v3.22.0"

	helmModule     = "helm.sh/helm/v3"
	kubectlPackage = kubeModule + "/cmd/kubectl"
	helmPackage    = helmModule + "/cmd/helm"

	// toolRecipe changes whenever the way kubectl, kube-scheduler, kubelet,
	// kube-proxy or helm is built changes.
	toolRecipe = "1"
)

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
	return installTool(ctx, cfg, kubeCmdTool(cfg, "kubectl", "under a minute after kube-apiserver, ~5 minutes without"))
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

// Kubelet returns the path of kubelet KubernetesVersion, built like kubectl
// (see Kubectl) from k8s.io/kubernetes/cmd/kubelet into the control plane's
// bin directory, with its own stamp. It is built with cgo as the go command
// defaults to (as Kubernetes releases build kubelet), which also lets it
// reuse the control plane's packages from the Go build cache: about a
// minute after kube-apiserver on two cores, five or so without (built with
// CGO_ENABLED=0 it shares nothing with them and takes seven or more). kubelet
// only runs as root on Linux; building it needs neither. Safe to call from
// several processes at once.
func Kubelet(ctx context.Context, cfg Config) (path string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	return installTool(ctx, cfg, kubeCmdTool(cfg, "kubelet", "about a minute after kube-apiserver, ~5 minutes without"))
}

// KubeProxy returns the path of kube-proxy KubernetesVersion, built like
// kubectl (see Kubectl) from k8s.io/kubernetes/cmd/kube-proxy into the
// control plane's bin directory, with its own stamp: under half a minute
// after kubelet. Safe to call from several processes at once.
func KubeProxy(ctx context.Context, cfg Config) (path string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	return installTool(ctx, cfg, kubeCmdTool(cfg, "kube-proxy", "under a minute after kubelet, ~5 minutes without"))
}

// KubeScheduler returns the path of kube-scheduler KubernetesVersion, built
// like kubectl (see Kubectl) from k8s.io/kubernetes/cmd/kube-scheduler into
// the control plane's bin directory, with its own stamp: under a minute
// after kube-apiserver. envtest does not run it; a cluster with a kubelet
// needs it to place pods. Safe to call from several processes at once.
func KubeScheduler(ctx context.Context, cfg Config) (path string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	return installTool(ctx, cfg, kubeCmdTool(cfg, "kube-scheduler", "under a minute after kube-apiserver, ~5 minutes without"))
}

// ToolInstalled returns the path of name (kubectl, kube-scheduler, kubelet,
// kube-proxy or helm) and whether a complete build of it is in the cache.
// It never builds.
func ToolInstalled(cfg Config, name string) (path string, ok bool, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", false, err
	}
	var t gobuild.Tool
	switch name {
	case "kubectl", "kube-scheduler", "kubelet", "kube-proxy":
		t = kubeCmdTool(cfg, name, "")
	case "helm":
		t = helmTool(cfg)
	default:
		return "", false, fmt.Errorf("localkube: no tool %q (want kubectl, kube-scheduler, kubelet, kube-proxy or helm)", name)
	}
	return t.Path(name), t.Installed(), nil
}

// kubeCmdTool builds k8s.io/kubernetes/cmd/<name> into the control plane's
// bin directory. The stamp format is kubectl's since its first release;
// changing it rebuilds every cached kubectl.
func kubeCmdTool(cfg Config, name, expect string) gobuild.Tool {
	pkg := kubeModule + "/cmd/" + name
	return gobuild.Tool{
		Name:     name,
		Version:  KubernetesVersion,
		Dir:      cfg.versionDir(),
		Stamp:    fmt.Sprintf("%s=%s staging=%s recipe=%s\n", name, KubernetesVersion, StagingVersion, toolRecipe),
		Commands: []gobuild.Command{{Name: name, Pkg: pkg, Expect: expect}},
		// The same module graph as the control plane's: seconds once that is in the module cache.
		ResolveExpect: kubeResolveExpect,
		GoMod: func(ctx context.Context, b *gobuild.Builder, src string) (string, error) {
			upstream, err := b.UpstreamGoMod(ctx, src, kubeModule, KubernetesVersion)
			if err != nil {
				return "", err
			}
			return kubeGoMod(upstream, pkg)
		},
		LDFlags: func(context.Context, *gobuild.Builder, string) (string, error) { return versionLDFlags(), nil },
	}
}

func helmTool(cfg Config) gobuild.Tool {
	return gobuild.Tool{
		Name:     "helm",
		Version:  HelmVersion,
		Dir:      filepath.Join(cfg.CacheDir, "helm", HelmVersion),
		Stamp:    fmt.Sprintf("helm=%s recipe=%s\n", HelmVersion, toolRecipe),
		Commands: []gobuild.Command{{Name: "helm", Pkg: helmPackage, Expect: "1-2 minutes"}},
		GoMod: func(ctx context.Context, b *gobuild.Builder, src string) (string, error) {
			upstream, err := b.UpstreamGoMod(ctx, src, helmModule, HelmVersion)
			if err != nil {
				return "", err
			}
			return helmGoMod(upstream), nil
		},
		// helm's Makefile derives the Kubernetes version that templates and
		// lint assume without a cluster from the client-go it is built with.
		LDFlags: func(ctx context.Context, b *gobuild.Builder, src string) (string, error) {
			out, err := b.Go(ctx, src, "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go")
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
	return gobuild.RequireGoMod("// Generated by baton's internal/testing/localkube: builds helm from "+helmModule+" "+HelmVersion+".",
		"baton.local/localkube/helm", upstream, helmModule, HelmVersion, helmPackage)
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

// installTool builds t unless a complete build is in the cache and returns
// the path of its one binary.
func installTool(ctx context.Context, cfg Config, t gobuild.Tool) (string, error) {
	if _, err := gobuild.Install(ctx, gobuild.Options{Prefix: prefix, Progress: cfg.Progress, GoBinary: cfg.GoBinary}, t); err != nil {
		return "", err
	}
	return t.Path(t.Name), nil
}
