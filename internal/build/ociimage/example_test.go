package ociimage_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/baton-dev/baton/internal/build/ociimage"
)

// A static binary on the nonroot base, written to a docker-archive for docker load or ctr images
// import.
func Example() {
	spec := ociimage.NonrootBase(nil)
	spec.Files = append(spec.Files, ociimage.File{
		Path: "/usr/local/bin/hello", Mode: 0o755, Data: []byte("a static binary"),
	})
	spec.Config.Entrypoint = []string{"/usr/local/bin/hello"}
	img, err := ociimage.Build(spec)
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	err = ociimage.WriteArchive(filepath.Join(dir, "images.tar"),
		ociimage.Tagged{Image: img, Tags: []string{"baton.local/hello:dev"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	cf, err := img.ConfigFile()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cf.OS, cf.Architecture, cf.Config.User, cf.Config.Entrypoint)
	// Output: linux amd64 65532 [/usr/local/bin/hello]
}
