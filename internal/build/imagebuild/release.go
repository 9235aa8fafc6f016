package imagebuild

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/baton-dev/baton/internal/build/ociimage"
)

// BuildRelease builds the baton binaries with the Makefile's BUILD line (its VERSION and COMMIT
// from WithVersion), assembles the baton image (BatonSpec) tagged tag, and writes it to archive
// as an OCI archive (ociimage.WriteOCIArchive) and its CycloneDX SBOM to sbomFile. The binaries
// are built in a temporary directory, removed afterwards; WithBatonBinaries takes them from a
// directory instead. The pause and demo app images are not built: a release ships baton alone.
//
// What it does not check: that the binaries in WithBatonBinaries were built with the release
// and commit the caller means (it reports what the files say, through the SBOM).
func BuildRelease(ctx context.Context, tag, archive, sbomFile string, opts ...Option) (Image, error) {
	o := newOptions(opts)
	start := time.Now()
	if _, err := name.NewTag(tag, name.StrictValidation); err != nil {
		return Image{}, fmt.Errorf("imagebuild: tag %q: %w (want registry/repository:tag)", tag, err)
	}
	if o.srcDir == "" {
		dir, err := moduleRoot(ctx, o.goCmd)
		if err != nil {
			return Image{}, err
		}
		o.srcDir = dir
	}
	names, err := BatonBinaries(o.srcDir)
	if err != nil {
		return Image{}, err
	}
	bins := o.batonBins
	if bins == "" {
		tmp, err := os.MkdirTemp("", "baton-release-bin-")
		if err != nil {
			return Image{}, fmt.Errorf("imagebuild: %w", err)
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		bins = tmp
		if err := o.goBuild(ctx, "baton binaries "+strings.Join(names, ", "), batonBuildArgs(bins+"/", o.version, o.commit)); err != nil {
			return Image{}, err
		}
	}
	bundle, err := o.readCABundle()
	if err != nil {
		return Image{}, err
	}
	spec := BatonSpec(bins, names, bundle)
	img, err := ociimage.Build(spec)
	if err != nil {
		return Image{}, fmt.Errorf("imagebuild: %s: %w", tag, err)
	}
	desc, err := describe(tag, img)
	if err != nil {
		return Image{}, err
	}
	desc.SBOM = sbomFile
	if err := writeSBOM(sbomFile, desc, spec); err != nil {
		return Image{}, err
	}
	if err := ociimage.WriteOCIArchive(archive, ociimage.Tagged{Image: img, Tags: []string{tag}}); err != nil {
		return Image{}, err
	}
	fmt.Fprintf(o.progress, "imagebuild: wrote %s (%s, %.1f MiB) and its SBOM in %.1fs\n",
		archive, desc.Digest, float64(desc.Size)/(1<<20), time.Since(start).Seconds())
	return desc, nil
}
