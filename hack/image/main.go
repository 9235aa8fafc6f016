// Command image builds baton's container images without Docker (see package imagebuild) and
// prints their tags and digests:
//
//	go run ./hack/image [-out _out] [-baton-bin bin] [-ca-bundle /etc/ssl/certs/ca-certificates.crt]
//
// It writes <out>/images.tar, one docker-archive holding baton.local/baton:dev,
// baton.local/pause:dev and baton.local/demoapp:dev, and beside it each image's CycloneDX SBOM,
// <out>/sbom/{baton,pause,demoapp}.cdx.json. Import it with
// `ctr -n k8s.io images import _out/images.tar`, `docker load -i _out/images.tar` or
// `kind load image-archive _out/images.tar`. make image runs it after the Makefile's BUILD.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/baton-dev/baton/internal/build/imagebuild"
)

func main() {
	out := flag.String("out", "_out", "output directory: the archive goes to <out>/images.tar, the SBOMs to <out>/sbom, the binaries to <out>/imagebin")
	batonBin := flag.String("baton-bin", "", "take the baton binaries from this directory (where make build put them) instead of building them")
	caBundle := flag.String("ca-bundle", imagebuild.DefaultCABundle, `CA bundle (PEM) for the images; "" for none`)
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := []imagebuild.Option{imagebuild.WithProgress(os.Stderr), imagebuild.WithBatonBinaries(*batonBin)}
	if *caBundle != imagebuild.DefaultCABundle {
		opts = append(opts, imagebuild.WithCABundle(*caBundle))
	}
	res, err := imagebuild.BuildAll(ctx, *out, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tDIGEST\tIMAGE ID\tSIZE\tSBOM")
	for _, img := range res.Images {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f MiB\t%s\n", img.Tag, img.Digest, img.ID, float64(img.Size)/(1<<20), img.SBOM)
	}
	_ = tw.Flush()
	if st, err := os.Stat(res.Archive); err == nil {
		fmt.Printf("archive: %s (%.1f MiB)\n", res.Archive, float64(st.Size())/(1<<20))
	}
}
