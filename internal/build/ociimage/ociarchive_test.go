package ociimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestWriteOCIArchive reads the archive back each way its users do: as an OCI image layout (what
// ctr images import and kind load image-archive read) and as a docker-archive (docker load; crane
// push reads it with the same tarball package); each gives the image Build made, under the same
// digest.
func TestWriteOCIArchive(t *testing.T) {
	img, err := Build(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	const tag = "ghcr.io/baton-dev/baton:v1.2.3"
	path := filepath.Join(t.TempDir(), "baton.tar")
	if err := WriteOCIArchive(path, Tagged{Image: img, Tags: []string{tag}}); err != nil {
		t.Fatal(err)
	}

	// The same bytes every time.
	again := filepath.Join(t.TempDir(), "again.tar")
	if err := WriteOCIArchive(again, Tagged{Image: img, Tags: []string{tag}}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("two archives of the same image differ")
	}

	t.Run("OCI layout", func(t *testing.T) {
		dir := untar(t, path)
		var ol struct {
			Version string `json:"imageLayoutVersion"`
		}
		readJSON(t, filepath.Join(dir, "oci-layout"), &ol)
		if ol.Version != "1.0.0" {
			t.Errorf("oci-layout version %q, want 1.0.0 (containerd refuses others)", ol.Version)
		}
		idx, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate.Index(idx); err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 {
			t.Fatalf("index.json holds %d manifests, want 1", len(im.Manifests))
		}
		d := im.Manifests[0]
		if diff := cmp.Diff(map[string]string{AnnotationImageName: tag, AnnotationRefName: "v1.2.3"}, d.Annotations); diff != "" {
			t.Errorf("annotations (-want +got):\n%s", diff)
		}
		if d.Digest != want {
			t.Errorf("index.json names %s, Build made %s", d.Digest, want)
		}
		got, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		sameFiles(t, img, got)
	})
	t.Run("docker-archive", func(t *testing.T) {
		got := readArchive(t, path, tag)
		if d, _ := got.Digest(); d != want {
			t.Errorf("manifest.json gives digest %s, Build made %s", d, want)
		}
		sameFiles(t, img, got)
		// crane push takes an archive of one image without naming a tag.
		if _, err := tarball.ImageFromPath(path, nil); err != nil {
			t.Errorf("as crane push reads it: %v", err)
		}
	})
}

func TestWriteOCIArchiveInvalid(t *testing.T) {
	img, err := Build(Spec{Files: []File{{Path: "/a", Data: []byte("a")}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		images []Tagged
	}{
		{"no images", nil},
		{"no tag", []Tagged{{Image: img}}},
		{"no registry", []Tagged{{Image: img, Tags: []string{"a:dev"}}}},
		{"tag twice", []Tagged{{Image: img, Tags: []string{"baton.local/a:dev", "baton.local/a:dev"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.tar")
			if err := WriteOCIArchive(bad, tc.images...); !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("WriteOCIArchive: %v, want ErrInvalidSpec", err)
			}
			if _, err := os.Stat(bad); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the archive exists after an error (%v)", err)
			}
		})
	}
}

// sameFiles fails the test when the two images' file systems differ.
func sameFiles(t *testing.T, want, got v1.Image) {
	t.Helper()
	if diff := cmp.Diff(extract(t, want), extract(t, got)); diff != "" {
		t.Errorf("files (-built +read back):\n%s", diff)
	}
}

// untar extracts the archive at path into a new directory and returns it.
func untar(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return dir
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
