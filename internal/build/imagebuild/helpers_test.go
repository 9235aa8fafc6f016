package imagebuild

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// entry is one file of an image as a test sees it.
type entry struct {
	Name     string
	Type     byte
	Mode     fs.FileMode
	UID, GID int
	Content  []byte
}

// extract returns the image's flattened file system, in tar order.
func extract(t *testing.T, img v1.Image) []entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	var out []entry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{Name: hdr.Name, Type: hdr.Typeflag, Mode: hdr.FileInfo().Mode(), UID: hdr.Uid, GID: hdr.Gid, Content: b})
	}
}
