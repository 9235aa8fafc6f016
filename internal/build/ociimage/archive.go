package ociimage

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Tagged is an image and the tags it goes by in an archive.
type Tagged struct {
	Image v1.Image
	// Tags are fully qualified, "registry/repository:tag", e.g. "baton.local/baton:dev": a runtime
	// that imports the archive knows the image by exactly these names.
	Tags []string
}

// WriteArchive writes images into a docker-archive tarball at path (manifest.json, one config
// and one gzip blob per layer; layers shared by images are stored once), the format of docker
// save. docker load, kind load image-archive, crane push and ctr images import read it. The file
// appears complete or not at all: it is written next to path and renamed. The images' digests are
// reproducible; the order of the entries in the tarball is not.
func WriteArchive(path string, images ...Tagged) error {
	refs := make(map[name.Reference]v1.Image)
	for _, t := range images {
		if len(t.Tags) == 0 {
			return fmt.Errorf("%w: an image in the archive has no tag", ErrInvalidSpec)
		}
		for _, s := range t.Tags {
			tag, err := name.NewTag(s, name.StrictValidation)
			if err != nil {
				return fmt.Errorf("%w: tag %q: %w (want registry/repository:tag)", ErrInvalidSpec, s, err)
			}
			if _, dup := refs[tag]; dup {
				return fmt.Errorf("%w: tag %q names two images", ErrInvalidSpec, s)
			}
			refs[tag] = t.Image
		}
	}
	if len(refs) == 0 {
		return fmt.Errorf("%w: no images to write", ErrInvalidSpec)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("ociimage: create the archive: %w", err)
	}
	_ = tmp.Close()
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tarball.MultiRefWriteToFile(tmp.Name(), refs); err != nil {
		return fmt.Errorf("ociimage: write the archive %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("ociimage: write the archive %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("ociimage: write the archive %s: %w", path, err)
	}
	return nil
}
