package ociimage

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the manifests in an OCI archive's index.json.
const (
	// AnnotationImageName is the full reference containerd (ctr images import, kind load
	// image-archive) names the image by; without it ctr names an OCI layout's images
	// "import-<date>:<tag>" or not at all.
	AnnotationImageName = "io.containerd.image.name"
	// AnnotationRefName is the OCI image layout's own name for a manifest: the tag alone.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// ociLayoutVersion is the image layout version WriteOCIArchive writes (oci-layout).
const ociLayoutVersion = "1.0.0"

// WriteOCIArchive writes images into a tarball that is at once an OCI image layout (oci-layout,
// index.json, blobs/sha256/<hex>) and a docker-archive (a manifest.json naming the same config and
// layer blobs), the format docker save writes since Docker 25:
//
//   - ctr images import and kind load image-archive read the OCI layout and name each image by
//     its index.json annotation AnnotationImageName (the full tag);
//   - docker load and crane push <archive> <ref> read manifest.json (crane push takes an archive of
//     one image only);
//   - tar -x gives an OCI layout directory that crane push, skopeo (oci:) and oras read.
//
// The manifests and configs keep the Docker schema 2 media types Build gives them, so every
// reader computes the same manifest digest (docker-archive readers rebuild the manifest with
// those media types). Entries are sorted and timestamped with the Unix epoch, so the same images
// and tags give the same bytes. The file appears complete or not at all. It holds each image in
// memory as Build does: suitable for images of tens of megabytes.
func WriteOCIArchive(path string, images ...Tagged) error {
	if len(images) == 0 {
		return fmt.Errorf("%w: no images to write", ErrInvalidSpec)
	}
	seen := map[string]bool{}
	for _, t := range images {
		if len(t.Tags) == 0 {
			return fmt.Errorf("%w: an image in the archive has no tag", ErrInvalidSpec)
		}
		for _, s := range t.Tags {
			if _, err := name.NewTag(s, name.StrictValidation); err != nil {
				return fmt.Errorf("%w: tag %q: %w (want registry/repository:tag)", ErrInvalidSpec, s, err)
			}
			if seen[s] {
				return fmt.Errorf("%w: tag %q names two images", ErrInvalidSpec, s)
			}
			seen[s] = true
		}
	}
	entries, err := ociEntries(images)
	if err != nil {
		return fmt.Errorf("ociimage: write the archive %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("ociimage: create the archive: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	werr := writeTar(tmp, entries)
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp.Name(), 0o644)
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		return fmt.Errorf("ociimage: write the archive %s: %w", path, werr)
	}
	return nil
}

// tarEntry is one file of an archive: its content now, or an opener for a layer's compressed
// bytes of a known size.
type tarEntry struct {
	name string
	data []byte
	open func() (io.ReadCloser, error)
	size int64
}

// dockerManifestEntry is one image of a docker-archive's manifest.json.
type dockerManifestEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// ociEntries returns the archive's files in the order they are written: oci-layout, the blobs
// sorted by digest, index.json, manifest.json.
func ociEntries(images []Tagged) ([]tarEntry, error) {
	blobs := map[string]tarEntry{}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	var docker []dockerManifestEntry
	for _, t := range images {
		raw, err := t.Image.RawManifest()
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		m, err := t.Image.Manifest()
		if err != nil {
			return nil, fmt.Errorf("manifest: %w", err)
		}
		mt, err := t.Image.MediaType()
		if err != nil {
			return nil, fmt.Errorf("media type: %w", err)
		}
		cfg, err := t.Image.RawConfigFile()
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		digest, err := t.Image.Digest()
		if err != nil {
			return nil, fmt.Errorf("digest: %w", err)
		}
		blobs[digest.Hex] = tarEntry{name: blobPath(digest), data: raw}
		blobs[m.Config.Digest.Hex] = tarEntry{name: blobPath(m.Config.Digest), data: cfg}
		de := dockerManifestEntry{Config: blobPath(m.Config.Digest), RepoTags: slices.Clone(t.Tags)}
		layers, err := t.Image.Layers()
		if err != nil {
			return nil, fmt.Errorf("layers: %w", err)
		}
		for i, l := range layers {
			d := m.Layers[i].Digest
			blobs[d.Hex] = tarEntry{name: blobPath(d), open: l.Compressed, size: m.Layers[i].Size}
			de.Layers = append(de.Layers, blobPath(d))
		}
		docker = append(docker, de)
		for _, s := range t.Tags {
			tag, _ := name.NewTag(s, name.StrictValidation) // checked by the caller
			index.Manifests = append(index.Manifests, v1.Descriptor{
				MediaType: mt, Digest: digest, Size: int64(len(raw)),
				Annotations: map[string]string{AnnotationImageName: tag.Name(), AnnotationRefName: tag.TagStr()},
				Platform:    &v1.Platform{OS: OS, Architecture: Architecture},
			})
		}
	}
	layout, err := json.Marshal(map[string]string{"imageLayoutVersion": ociLayoutVersion})
	if err != nil {
		return nil, err
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}
	dockerJSON, err := json.Marshal(docker)
	if err != nil {
		return nil, err
	}
	out := []tarEntry{{name: "oci-layout", data: layout}}
	for _, hex := range slices.Sorted(maps.Keys(blobs)) {
		out = append(out, blobs[hex])
	}
	return append(out, tarEntry{name: "index.json", data: indexJSON}, tarEntry{name: "manifest.json", data: dockerJSON}), nil
}

// blobPath is where the OCI layout keeps the blob with digest d.
func blobPath(d v1.Hash) string { return "blobs/" + d.Algorithm + "/" + d.Hex }

// writeTar writes entries, preceded by the blobs/ and blobs/sha256/ directories, as a tar stream
// with root-owned files and the Unix epoch as every time.
func writeTar(w io.Writer, entries []tarEntry) error {
	tw := tar.NewWriter(w)
	hdr := func(name string, mode int64, typ byte, size int64) *tar.Header {
		return &tar.Header{Name: name, Mode: mode, Typeflag: typ, Size: size, ModTime: epoch, Format: tar.FormatPAX}
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(hdr(dir, 0o755, tar.TypeDir, 0)); err != nil {
			return err
		}
	}
	for _, e := range entries {
		size := int64(len(e.data))
		if e.open != nil {
			size = e.size
		}
		if err := tw.WriteHeader(hdr(e.name, 0o644, tar.TypeReg, size)); err != nil {
			return err
		}
		if e.open == nil {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
			continue
		}
		if err := copyBlob(tw, e); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyBlob copies a layer's compressed bytes into tw, which fails if they are not e.size long.
func copyBlob(tw *tar.Writer, e tarEntry) error {
	rc, err := e.open()
	if err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	defer func() { _ = rc.Close() }()
	if _, err := io.Copy(tw, rc); err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	return nil
}
