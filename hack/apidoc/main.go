// Command apidoc renders the sidecar API's OpenAPI document as the Markdown reference page:
//
//	go run ./hack/apidoc [-in docs/api/sidecar.openapi.yaml] [-out docs/api/sidecar.md] [-check]
//
// It loads and validates the document with kin-openapi first, so an invalid document fails. With
// -check (make check) it writes nothing and exits 1 when -out differs from what it would write,
// saying to run make api-docs; without, it writes -out (make api-docs).
//
// What it does not do: render every OpenAPI feature. It knows what the sidecar's document uses
// (paths with one tag per operation, parameters, JSON request bodies, responses by $ref or
// inline, component schemas built from objects, arrays, enums and allOf, and the extension
// x-unrouted-responses) and renders other constructs only by their type.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
)

// errStale is returned by run with -check when the page differs from the document.
var errStale = errors.New("is stale")

func main() {
	in := flag.String("in", "docs/api/sidecar.openapi.yaml", "the OpenAPI document")
	out := flag.String("out", "docs/api/sidecar.md", "the Markdown page to write or check")
	check := flag.Bool("check", false, "only check that -out is up to date; exit 1 if not")
	flag.Parse()
	if err := run(context.Background(), *in, *out, *check); err != nil {
		fmt.Fprintln(os.Stderr, "apidoc:", err)
		os.Exit(1)
	}
}

// run renders in and writes out, or with check compares it with out.
func run(ctx context.Context, in, out string, check bool) error {
	doc, err := load(ctx, in)
	if err != nil {
		return err
	}
	page, err := render(doc, in)
	if err != nil {
		return err
	}
	if !check {
		return os.WriteFile(out, page, 0o644)
	}
	old, err := os.ReadFile(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !bytes.Equal(old, page) {
		return fmt.Errorf("%s %w: it differs from what %s renders to; run make api-docs", out, errStale, in)
	}
	return nil
}
