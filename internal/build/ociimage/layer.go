package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// newLayer writes entries (sorted, checked) into an uncompressed tar and gzips it, both in memory.
func newLayer(entries []File) (v1.Layer, error) {
	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	for _, f := range entries {
		if err := writeEntry(tw, f); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: finish layer: %w", err)
	}
	var gzBuf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gzBuf, gzip.BestSpeed)
	if err != nil {
		return nil, fmt.Errorf("ociimage: compress layer: %w", err)
	}
	if _, err := zw.Write(tarBuf.Bytes()); err != nil {
		return nil, fmt.Errorf("ociimage: compress layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("ociimage: compress layer: %w", err)
	}
	l := &layer{tar: tarBuf.Bytes(), gz: gzBuf.Bytes()}
	if l.diffID, _, err = v1.SHA256(bytes.NewReader(l.tar)); err != nil {
		return nil, fmt.Errorf("ociimage: hash layer: %w", err)
	}
	if l.digest, _, err = v1.SHA256(bytes.NewReader(l.gz)); err != nil {
		return nil, fmt.Errorf("ociimage: hash layer: %w", err)
	}
	return l, nil
}

// layer is a gzip layer held in memory, uncompressed and compressed. (tarball.LayerFromOpener
// would do, but its descriptors carry an empty annotation map that validate.Image rejects.)
type layer struct {
	tar, gz        []byte
	diffID, digest v1.Hash
}

var _ v1.Layer = (*layer)(nil)

func (l *layer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *layer) Size() (int64, error)                { return int64(len(l.gz)), nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.DockerLayer, nil }
func (l *layer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.gz)), nil
}
func (l *layer) Uncompressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.tar)), nil
}

func writeEntry(tw *tar.Writer, f File) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(f.Path, "/"),
		Mode:    tarMode(f.Mode),
		Uid:     f.UID,
		Gid:     f.GID,
		ModTime: epoch,
	}
	var content []byte
	switch {
	case f.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case f.Source != "":
		b, err := os.ReadFile(f.Source)
		if err != nil {
			return fmt.Errorf("ociimage: read the content of %s: %w", f.Path, err)
		}
		content = b
	default:
		content = f.Data
	}
	if !f.IsDir() {
		hdr.Typeflag = tar.TypeReg
		hdr.Size = int64(len(content))
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("ociimage: write %s: %w", f.Path, err)
	}
	if _, err := tw.Write(content); err != nil {
		return fmt.Errorf("ociimage: write %s: %w", f.Path, err)
	}
	return nil
}

// tarMode converts a Go file mode into the Unix mode bits of a tar header.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
