// Package release writes everything a user installs baton from, for one version, into one
// directory (make release VERSION=v1.2.3 runs it through hack/release):
//
//	<out>/<version>/baton-image-<version>.tar      the baton image (operator, sidecar, baton CLI) as
//	                                              an OCI archive that also carries a docker
//	                                              manifest.json (ociimage.WriteOCIArchive), tagged
//	                                              <chart's image.repository>:<version>
//	<out>/<version>/baton-image-<version>.cdx.json the image's CycloneDX SBOM (package sbom)
//	<out>/<version>/baton-<chart version>.tgz      the chart, helm package'd with version and
//	                                              appVersion <version> less its "v", so that its
//	                                              image tag defaults to <version>
//	<out>/<version>/SHA256SUMS                     sha256sum -c input for the files above
//
// Every binary states <version> and the commit for --version. A tree with uncommitted changes
// (git status --porcelain: modified, staged or untracked files) is refused unless AllowDirty; then
// the commit is stated as "<sha>-dirty".
//
// What it does not do: push anything (no public registry exists), sign, build for another
// platform than linux/amd64, or tag git.
package release

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/baton-dev/baton/internal/build/imagebuild"
)

// Errors Build returns before it writes anything.
var (
	// ErrVersion: the version is not a semantic version with a leading v.
	ErrVersion = errors.New("release: bad version")
	// ErrDirty: the tree has uncommitted changes and AllowDirty is false.
	ErrDirty = errors.New("release: the working tree has uncommitted changes")
)

// ChartDir is the chart's directory relative to the module root.
const ChartDir = "charts/baton"

// SumsFile is the checksum file's name.
const SumsFile = "SHA256SUMS"

// Config says what to release and how.
type Config struct {
	// Version is the release, v<semver> without build metadata: v1.2.3, v1.2.3-rc.1.
	Version string
	// SourceDir is the module root (the git checkout) to build from. Required.
	SourceDir string
	// OutDir is where the release directory <Version> goes, e.g. _out/release. Required.
	OutDir string
	// Helm is the helm binary that packages the chart. Required.
	Helm string
	// AllowDirty releases a tree with uncommitted changes, its commit stated as "<sha>-dirty".
	AllowDirty bool
	// Progress receives a line per step ("release: ..."); nil discards them.
	Progress io.Writer
	// ImageOptions are passed to imagebuild.BuildRelease (e.g. WithCABundle); the version,
	// commit and source directory are set here.
	ImageOptions []imagebuild.Option
}

// Result is what Build wrote.
type Result struct {
	Dir          string // <OutDir>/<Version>
	Version      string // e.g. v1.2.3
	ChartVersion string // e.g. 1.2.3: the chart's version and appVersion
	Commit       string // as the binaries state it
	Image        imagebuild.Image
	ImageArchive string
	Chart        string // the packaged chart
	SBOM         string
	Sums         string
}

// semverV is a semantic version (semver.org 2.0.0) with a leading v and no build metadata.
var semverV = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?$`)

// ValidateVersion returns an error wrapping ErrVersion, saying what is wrong and what is
// expected, unless v is v<MAJOR>.<MINOR>.<PATCH>[-<pre-release>]. Build metadata (+...) is
// refused: an image tag cannot carry a "+".
func ValidateVersion(v string) error {
	switch {
	case v == "":
		return fmt.Errorf("%w: no version given: set VERSION=vX.Y.Z (e.g. make release VERSION=v0.1.0)", ErrVersion)
	case strings.Contains(v, "+"):
		return fmt.Errorf("%w: %q carries build metadata (+...), which an image tag cannot: use a pre-release (-rc.1) instead", ErrVersion, v)
	case !strings.HasPrefix(v, "v"):
		return fmt.Errorf("%w: %q has no leading v: want v%s", ErrVersion, v, v)
	case !semverV.MatchString(v):
		return fmt.Errorf("%w: %q is not a semantic version with a leading v: want vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. v1.2.3 or v1.2.3-rc.1", ErrVersion, v)
	}
	return nil
}

// Build writes the release of c.Version into c.OutDir/c.Version, replacing what a previous run
// left there. It checks the version and the tree before it writes anything. The image is tagged
// with the chart's image.repository (values.yaml), so that a node that loaded the archive runs
// the chart's defaults without pulling.
func Build(ctx context.Context, c Config) (Result, error) {
	start := time.Now()
	if err := ValidateVersion(c.Version); err != nil {
		return Result{}, err
	}
	if c.SourceDir == "" || c.OutDir == "" || c.Helm == "" {
		return Result{}, errors.New("release: SourceDir, OutDir and Helm are required")
	}
	src, err := filepath.Abs(c.SourceDir)
	if err != nil {
		return Result{}, fmt.Errorf("release: %w", err)
	}
	c.SourceDir = src
	progress := c.Progress
	if progress == nil {
		progress = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "release: "+format+"\n", args...) }

	commit, err := Commit(ctx, c.SourceDir, c.AllowDirty, progress)
	if err != nil {
		return Result{}, err
	}
	repo, err := chartImageRepository(filepath.Join(c.SourceDir, ChartDir))
	if err != nil {
		return Result{}, err
	}
	res := Result{Version: c.Version, ChartVersion: strings.TrimPrefix(c.Version, "v"), Commit: commit}
	res.Dir = filepath.Join(c.OutDir, c.Version)
	say("%s at commit %s into %s", c.Version, commit, res.Dir)
	if err := os.RemoveAll(res.Dir); err != nil {
		return Result{}, fmt.Errorf("release: clear %s: %w", res.Dir, err)
	}
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("release: %w", err)
	}

	tag := repo + ":" + c.Version
	res.ImageArchive = filepath.Join(res.Dir, "baton-image-"+c.Version+".tar")
	res.SBOM = filepath.Join(res.Dir, "baton-image-"+c.Version+".cdx.json")
	say("building the image %s (the binaries state %s commit %s)", tag, c.Version, commit)
	opts := append(slices.Clone(c.ImageOptions), imagebuild.WithProgress(progress),
		imagebuild.WithSourceDir(c.SourceDir), imagebuild.WithVersion(c.Version, commit))
	if res.Image, err = imagebuild.BuildRelease(ctx, tag, res.ImageArchive, res.SBOM, opts...); err != nil {
		return Result{}, err
	}

	say("packaging the chart %s as version %s, appVersion %s (image tag default %s)", ChartDir, res.ChartVersion, res.ChartVersion, c.Version)
	if res.Chart, err = packageChart(ctx, c.Helm, filepath.Join(c.SourceDir, ChartDir), res.Dir, res.ChartVersion); err != nil {
		return Result{}, err
	}

	res.Sums = filepath.Join(res.Dir, SumsFile)
	if err := writeSums(res.Sums, res.ImageArchive, res.Chart, res.SBOM); err != nil {
		return Result{}, err
	}
	say("wrote %s in %.1fs", res.Dir, time.Since(start).Seconds())
	return res, nil
}

// Commit returns the commit of the checkout at dir as a release states it: the commit, or
// "<sha>-dirty" when the tree has uncommitted changes and allowDirty (said on progress), and
// otherwise an error wrapping ErrDirty that lists them. Build calls it first; a caller may call it
// earlier to fail before slow preparations.
func Commit(ctx context.Context, dir string, allowDirty bool, progress io.Writer) (string, error) {
	sha, err := git(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return "", fmt.Errorf("release: the commit of %s: %w", dir, err)
	}
	status, err := git(ctx, dir, "status", "--porcelain")
	if err != nil {
		return "", fmt.Errorf("release: the state of %s: %w", dir, err)
	}
	if status == "" {
		return sha, nil
	}
	lines := strings.Split(status, "\n")
	shown := lines[:min(len(lines), 10)]
	more := ""
	if len(lines) > len(shown) {
		more = fmt.Sprintf("\n  ... and %d more", len(lines)-len(shown))
	}
	if !allowDirty {
		return "", fmt.Errorf("%w (git status --porcelain):\n  %s%s\ncommit them, or release anyway with ALLOW_DIRTY=1 (hack/release -allow-dirty): the binaries then state commit %s-dirty",
			ErrDirty, strings.Join(shown, "\n  "), more, sha)
	}
	fmt.Fprintf(progress, "release: WARNING: releasing a tree with %d uncommitted changes (ALLOW_DIRTY): the binaries state commit %s-dirty\n", len(lines), sha)
	return sha + "-dirty", nil
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// chartImageRepository reads image.repository from the chart's values.yaml.
func chartImageRepository(chartDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return "", fmt.Errorf("release: the chart's values: %w", err)
	}
	var v struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		return "", fmt.Errorf("release: the chart's values.yaml: %w", err)
	}
	if v.Image.Repository == "" {
		return "", fmt.Errorf("release: %s/values.yaml sets no image.repository", chartDir)
	}
	return v.Image.Repository, nil
}

// packageChart runs helm package on chartDir with version and appVersion version, into dest, and
// returns the package's path.
func packageChart(ctx context.Context, helm, chartDir, dest, version string) (string, error) {
	cmd := exec.CommandContext(ctx, helm, "package", chartDir, "--version", version, "--app-version", version, "--destination", dest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("release: helm package: %w\n%s", err, strings.TrimSpace(string(out)))
	}
	p := filepath.Join(dest, filepath.Base(chartDir)+"-"+version+".tgz")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("release: helm package said %q but wrote no %s: %w", strings.TrimSpace(string(out)), p, err)
	}
	return p, nil
}

// writeSums writes the SHA-256 of each file, by base name, in the format of sha256sum (and so
// sha256sum -c), sorted by name.
func writeSums(path string, files ...string) error {
	var b strings.Builder
	slices.SortFunc(files, func(a, b string) int { return strings.Compare(filepath.Base(a), filepath.Base(b)) })
	for _, f := range files {
		sum, err := fileSHA256(f)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.Base(f))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
