package imagebuild_test

import (
	"context"
	"fmt"
	"os"

	"github.com/baton-dev/baton/internal/build/imagebuild"
)

// A test that needs the images in a node's containerd builds them once and imports the archive
// (ctr -n k8s.io images import <archive>); pods then use imagebuild.BatonTag and friends with
// imagePullPolicy Never.
func ExampleBuildAll() {
	res, err := imagebuild.BuildAll(context.Background(), os.TempDir(), imagebuild.WithProgress(os.Stderr))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, img := range res.Images {
		fmt.Println(img.Tag, img.ID)
	}
	fmt.Println("import", res.Archive)
}
