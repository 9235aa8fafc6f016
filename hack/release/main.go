// Command release writes the release of one version into one directory (package release):
//
//	go run ./hack/release -version v1.2.3 [-out _out/release] [-allow-dirty] [-helm path]
//
// make release VERSION=v1.2.3 runs it. It prints a line per step, then the files, the image's
// digest and how to push both to a registry of your own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/build/release"
	"github.com/baton-dev/baton/internal/testing/localkube"
)

func main() {
	os.Exit(run())
}

func run() int {
	version := flag.String("version", "", "the release: v<semver>, e.g. v1.2.3 or v1.2.3-rc.1")
	out := flag.String("out", "_out/release", "the release goes to <out>/<version>")
	allowDirty := flag.Bool("allow-dirty", false, "release a tree with uncommitted changes (the binaries state commit <sha>-dirty)")
	helm := flag.String("helm", os.Getenv("HELM"), "helm binary that packages the chart (default $HELM, else the helm make install-deps caches, built if missing)")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		return 2
	}
	if err := release.ValidateVersion(*version); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	src, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The tree first: a refusal should not wait for helm.
	if _, err := release.Commit(ctx, src, *allowDirty, io.Discard); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if errors.Is(err, release.ErrDirty) {
			return 2
		}
		return 1
	}
	if *helm == "" {
		fmt.Fprintln(os.Stderr, "release: finding helm (the cached build of make install-deps; built from Go modules if missing, a few minutes)")
		hctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		*helm, err = localkube.Helm(hctx, localkube.Config{Progress: os.Stderr})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "release: no helm: %v (or pass HELM=/path/to/helm)\n", err)
			return 1
		}
	}
	res, err := release.Build(ctx, release.Config{
		Version: *version, SourceDir: src, OutDir: *out, Helm: *helm, AllowDirty: *allowDirty, Progress: os.Stderr,
	})
	if errors.Is(err, release.ErrDirty) || errors.Is(err, release.ErrVersion) {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rel := func(p string) string {
		if r, err := filepath.Rel(src, p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	fmt.Printf("release %s (commit %s) in %s:\n", res.Version, res.Commit, rel(res.Dir))
	for _, f := range []string{res.ImageArchive, res.Chart, res.SBOM, res.Sums} {
		size := ""
		if st, err := os.Stat(f); err == nil && st.Size() >= 1<<20 {
			size = fmt.Sprintf(" (%.1f MiB)", float64(st.Size())/(1<<20))
		} else if err == nil {
			size = fmt.Sprintf(" (%.1f KiB)", float64(st.Size())/(1<<10))
		}
		fmt.Printf("  %s%s\n", filepath.Base(f), size)
	}
	fmt.Printf("image %s, digest %s\n", res.Image.Tag, res.Image.Digest)
	fmt.Printf("push to your registry (no public registry exists yet; docs/supply-chain.md):\n")
	fmt.Printf("  crane push %s <registry>/baton:%s\n", rel(res.ImageArchive), res.Version)
	fmt.Printf("  helm push %s oci://<registry>/charts\n", rel(res.Chart))
	return 0
}
