package imagebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/baton-dev/baton/internal/build/ociimage"
	"github.com/baton-dev/baton/internal/build/sbom"
)

// ArchiveName is the file BuildAll writes in its output directory.
const ArchiveName = "images.tar"

// Each image's SBOM goes to <outDir>/SBOMDir/<repository's last element>SBOMSuffix, e.g.
// _out/sbom/baton.cdx.json: CycloneDX JSON (package sbom).
const (
	SBOMDir    = "sbom"
	SBOMSuffix = ".cdx.json"
)

// DefaultCABundle is the host's CA bundle that goes into the images, when it exists.
const DefaultCABundle = "/etc/ssl/certs/ca-certificates.crt"

// The packages of the binaries, relative to the module root.
const (
	batonPkgs  = "./cmd/..."
	pausePkg   = "./hack/pause"
	demoAppPkg = "./hack/demoapp"
)

// Image is one image BuildAll wrote.
type Image struct {
	// Tag is the image's name in the archive, e.g. BatonTag.
	Tag string
	// Digest is the manifest digest, "sha256:...": what a registry would call the image after
	// crane push.
	Digest string
	// ID is the config digest, "sha256:...": the image ID that docker images, ctr images ls and
	// crictl images show after an import. It depends on the files and config only.
	ID string
	// Size is the size of the compressed layer and the config, in bytes.
	Size int64
	// SBOM is the path of the image's software bill of materials.
	SBOM string
}

// Result is what BuildAll built.
type Result struct {
	// Archive is the docker-archive holding every image.
	Archive string
	// Images are baton, pause and demoapp, in that order.
	Images []Image
}

// Option sets an optional knob of BuildAll.
type Option func(*options)

type options struct {
	progress  io.Writer
	srcDir    string
	batonBins string
	caBundle  string
	goCmd     string
	version   string
	commit    string
}

// WithProgress sends progress lines ("imagebuild: ...") to w (default: none).
func WithProgress(w io.Writer) Option { return func(o *options) { o.progress = w } }

// WithSourceDir sets the module root to build from (default: the root of the module the working
// directory is in, as the go command finds it).
func WithSourceDir(dir string) Option { return func(o *options) { o.srcDir = dir } }

// WithBatonBinaries makes BuildAll take the baton binaries from dir, where the Makefile's BUILD
// line put them (make image passes bin), instead of building them.
func WithBatonBinaries(dir string) Option { return func(o *options) { o.batonBins = dir } }

// WithCABundle sets the PEM file copied into the images as their CA bundle (default
// DefaultCABundle when it exists); "" builds them without one.
func WithCABundle(path string) Option { return func(o *options) { o.caBundle = path } }

// WithVersion sets the release and commit the baton binaries state for --version, as the
// Makefile's VERSION and COMMIT do (default: both empty, so the binaries state what the go command
// stamped). It has no effect on binaries taken from WithBatonBinaries.
func WithVersion(release, commit string) Option {
	return func(o *options) { o.version, o.commit = release, commit }
}

// BuildAll builds the binaries, assembles the baton, pause and demoapp images and writes them to
// outDir/ArchiveName, creating outDir. The binaries go to outDir/imagebin. It takes about as long
// as go build does; with a warm Go build cache, seconds.
func BuildAll(ctx context.Context, outDir string, opts ...Option) (Result, error) {
	o := newOptions(opts)
	start := time.Now()
	outDir, err := filepath.Abs(outDir) // the go command runs in the source directory
	if err != nil {
		return Result{}, fmt.Errorf("imagebuild: output directory: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("imagebuild: create the output directory: %w", err)
	}
	if o.srcDir == "" {
		dir, err := moduleRoot(ctx, o.goCmd)
		if err != nil {
			return Result{}, err
		}
		o.srcDir = dir
	}
	names, err := BatonBinaries(o.srcDir)
	if err != nil {
		return Result{}, err
	}
	binDir := filepath.Join(outDir, "imagebin")
	batonBins := o.batonBins
	if batonBins != "" {
		if batonBins, err = filepath.Abs(batonBins); err != nil {
			return Result{}, fmt.Errorf("imagebuild: baton binaries: %w", err)
		}
	}
	if batonBins == "" {
		batonBins = filepath.Join(binDir, "baton")
		if err := o.goBuild(ctx, "baton binaries "+strings.Join(names, ", "), batonBuildArgs(batonBins+"/", o.version, o.commit)); err != nil {
			return Result{}, err
		}
	} else {
		fmt.Fprintf(o.progress, "imagebuild: baton binaries %s from %s\n", strings.Join(names, ", "), batonBins)
	}
	pauseBin, demoBin := filepath.Join(binDir, "pause"), filepath.Join(binDir, "demoapp")
	if err := o.goBuild(ctx, "pause", buildArgs(pauseBin, pausePkg)); err != nil {
		return Result{}, err
	}
	if err := o.goBuild(ctx, "demoapp", buildArgs(demoBin, demoAppPkg)); err != nil {
		return Result{}, err
	}

	bundle, err := o.readCABundle()
	if err != nil {
		return Result{}, err
	}
	specs := []struct {
		tag  string
		spec ociimage.Spec
	}{
		{BatonTag, BatonSpec(batonBins, names, bundle)},
		{PauseTag, PauseSpec(pauseBin)},
		{DemoAppTag, DemoAppSpec(demoBin, bundle)},
	}
	var tagged []ociimage.Tagged
	res := Result{Archive: filepath.Join(outDir, ArchiveName)}
	for _, s := range specs {
		img, err := ociimage.Build(s.spec)
		if err != nil {
			return Result{}, fmt.Errorf("imagebuild: %s: %w", s.tag, err)
		}
		desc, err := describe(s.tag, img)
		if err != nil {
			return Result{}, err
		}
		repo := s.tag[:strings.LastIndex(s.tag, ":")]
		desc.SBOM = filepath.Join(outDir, SBOMDir, path.Base(repo)+SBOMSuffix)
		if err := writeSBOM(desc.SBOM, desc, s.spec); err != nil {
			return Result{}, err
		}
		tagged = append(tagged, ociimage.Tagged{Image: img, Tags: []string{s.tag}})
		res.Images = append(res.Images, desc)
	}
	if err := ociimage.WriteArchive(res.Archive, tagged...); err != nil {
		return Result{}, err
	}
	fmt.Fprintf(o.progress, "imagebuild: wrote %s and the SBOMs in %s in %.1fs\n", res.Archive, filepath.Join(outDir, SBOMDir), time.Since(start).Seconds())
	return res, nil
}

// newOptions applies opts to the defaults. The default CA bundle is dropped, with a progress
// line, when the host has none.
func newOptions(opts []Option) options {
	o := options{progress: io.Discard, goCmd: "go", caBundle: DefaultCABundle}
	for _, opt := range opts {
		opt(&o)
	}
	if o.caBundle == DefaultCABundle {
		if _, err := os.Stat(DefaultCABundle); err != nil {
			fmt.Fprintf(o.progress, "imagebuild: no CA bundle (%s: %v): the images cannot verify public TLS certificates\n", DefaultCABundle, err)
			o.caBundle = ""
		}
	}
	return o
}

// readCABundle returns the CA bundle's content, nil when there is none.
func (o *options) readCABundle() ([]byte, error) {
	if o.caBundle == "" {
		return nil, nil
	}
	bundle, err := os.ReadFile(o.caBundle)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: read the CA bundle: %w", err)
	}
	fmt.Fprintf(o.progress, "imagebuild: CA bundle from %s\n", o.caBundle)
	return bundle, nil
}

// BatonBinaries returns the names of the binaries the Makefile's BUILD line makes in module root
// srcDir: one per directory of cmd/ that holds Go files, sorted.
func BatonBinaries(srcDir string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(srcDir, "cmd"))
	if err != nil {
		return nil, fmt.Errorf("imagebuild: list the baton commands (is %s baton's module root?): %w", srcDir, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		goFiles, _ := filepath.Glob(filepath.Join(srcDir, "cmd", e.Name(), "*.go"))
		if len(goFiles) > 0 {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("imagebuild: no commands in %s: is it baton's module root?", filepath.Join(srcDir, "cmd"))
	}
	slices.Sort(names)
	return names, nil
}

// VersionPackage is the package whose release and commit variables the build sets with -X.
const VersionPackage = "github.com/baton-dev/baton/internal/version"

// batonBuildArgs is the Makefile's BUILD line (environment CGO_ENABLED=0, see goBuild) with its
// output directory replaced by outDir, which must end in a slash, and its VERSION and COMMIT by
// release and commit.
func batonBuildArgs(outDir, release, commit string) []string {
	return []string{"build", "-trimpath", "-ldflags=" + VersionLDFlags(release, commit), "-o", outDir, batonPkgs}
}

// VersionLDFlags returns the BUILD line's -ldflags value for release and commit: stripped, with
// both set in VersionPackage. Empty values set nothing that the binary reports (see package
// version).
func VersionLDFlags(release, commit string) string {
	return "-s -w -X " + VersionPackage + ".release=" + release + " -X " + VersionPackage + ".commit=" + commit
}

// buildArgs builds one command with the flags of the BUILD line.
func buildArgs(out, pkg string) []string {
	return []string{"build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg}
}

// goBuild runs the go command with args in the source directory, with CGO_ENABLED=0, and
// reports it.
func (o *options) goBuild(ctx context.Context, what string, args []string) error {
	fmt.Fprintf(o.progress, "imagebuild: building %s (go %s)\n", what, strings.Join(args, " "))
	start := time.Now()
	cmd := exec.CommandContext(ctx, o.goCmd, args...)
	cmd.Dir = o.srcDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("imagebuild: build %s: %w\n%s", what, err, strings.TrimSpace(out.String()))
	}
	fmt.Fprintf(o.progress, "imagebuild: built %s in %.1fs\n", what, time.Since(start).Seconds())
	return nil
}

// moduleRoot asks the go command for the root of the module the working directory is in.
func moduleRoot(ctx context.Context, goCmd string) (string, error) {
	out, err := exec.CommandContext(ctx, goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("imagebuild: find the module root (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("imagebuild: the working directory is not in a Go module: run from baton's source tree or pass WithSourceDir")
	}
	return filepath.Dir(gomod), nil
}

// writeSBOM writes the CycloneDX SBOM of the image desc built from spec to file p, creating its
// directory. Every executable file of the spec read from disk (Source) is taken for a Go binary;
// files given as Data (passwd, the CA bundle) are not listed.
func writeSBOM(p string, desc Image, spec ociimage.Spec) error {
	img := sbom.Image{Ref: desc.Tag, Digest: desc.Digest, ID: desc.ID}
	for _, f := range spec.Files {
		if f.Source != "" && !f.IsDir() && f.Mode&0o111 != 0 {
			img.Binaries = append(img.Binaries, sbom.Binary{Path: f.Path, File: f.Source})
		}
	}
	bom, err := sbom.New(img)
	if err != nil {
		return fmt.Errorf("imagebuild: %s: %w", desc.Tag, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("imagebuild: %s: %w", desc.Tag, err)
	}
	if err := sbom.WriteFile(p, bom); err != nil {
		return fmt.Errorf("imagebuild: %s: %w", desc.Tag, err)
	}
	return nil
}

// describe returns the digests and size of img.
func describe(tag string, img v1.Image) (Image, error) {
	d, err := img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("imagebuild: %s: digest: %w", tag, err)
	}
	id, err := img.ConfigName()
	if err != nil {
		return Image{}, fmt.Errorf("imagebuild: %s: config digest: %w", tag, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, fmt.Errorf("imagebuild: %s: manifest: %w", tag, err)
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	return Image{Tag: tag, Digest: d.String(), ID: id.String(), Size: size}, nil
}
