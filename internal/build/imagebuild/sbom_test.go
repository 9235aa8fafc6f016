package imagebuild

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-cmp/cmp"

	"github.com/baton-dev/baton/internal/build/sbom"
)

// checkSBOMs checks the SBOM BuildAll wrote beside the archive for each image: it names the
// image by tag and digest, and lists exactly the image's Go binaries, each with the SHA-256 of
// the bytes in the image (files: each image's files by path, as extract returns them).
// internal/build/sbom's tests check the module list against go.mod.
func checkSBOMs(t *testing.T, out string, res Result, files map[string]map[string]entry) {
	t.Helper()
	wantBins := map[string][]string{
		BatonTag:   {"/usr/local/bin/baton", "/usr/local/bin/operator", "/usr/local/bin/sidecar"},
		PauseTag:   {"/pause"},
		DemoAppTag: {"/usr/local/bin/demoapp"},
	}
	for _, img := range res.Images {
		want := filepath.Join(out, SBOMDir, strings.TrimPrefix(img.Tag[:strings.LastIndex(img.Tag, ":")], "baton.local/")+SBOMSuffix)
		if img.SBOM != want {
			t.Errorf("%s: SBOM at %q, want %q", img.Tag, img.SBOM, want)
		}
		f, err := os.Open(want)
		if err != nil {
			t.Errorf("%s: %v", img.Tag, err)
			continue
		}
		var bom cdx.BOM
		err = cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom)
		_ = f.Close()
		if err != nil {
			t.Fatalf("%s: decode %s: %v", img.Tag, want, err)
		}
		meta := bom.Metadata.Component
		if ref := meta.Name + ":" + meta.Version; ref != img.Tag || meta.Type != cdx.ComponentTypeContainer {
			t.Errorf("%s: the SBOM describes %s %s", img.Tag, meta.Type, ref)
		}
		if got := prop(meta.Properties, sbom.PropImageDigest); got != img.Digest {
			t.Errorf("%s: the SBOM gives digest %q, BuildAll %q", img.Tag, got, img.Digest)
		}
		var bins []string
		for _, c := range *bom.Components {
			if c.Type != cdx.ComponentTypeApplication {
				continue
			}
			p := prop(c.Properties, sbom.PropPath)
			bins = append(bins, p)
			e, ok := files[img.Tag][strings.TrimPrefix(p, "/")]
			if !ok {
				t.Errorf("%s: the SBOM lists %s, which the image does not hold", img.Tag, p)
				continue
			}
			sum := sha256.Sum256(e.Content)
			if c.Hashes == nil || len(*c.Hashes) != 1 || (*c.Hashes)[0].Value != hex.EncodeToString(sum[:]) {
				t.Errorf("%s: %s: SBOM hashes %v, the image's file has SHA-256 %x", img.Tag, p, c.Hashes, sum)
			}
		}
		slices.Sort(bins)
		if diff := cmp.Diff(wantBins[img.Tag], bins); diff != "" {
			t.Errorf("%s: the SBOM's binaries (-want +got):\n%s", img.Tag, diff)
		}
	}
}

// prop returns the value of the property called name, or "".
func prop(ps *[]cdx.Property, name string) string {
	if ps == nil {
		return ""
	}
	for _, p := range *ps {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}
