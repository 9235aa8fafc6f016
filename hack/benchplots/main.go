// Command plots draws the PNG charts of a side-by-side comparison run from its JSON results:
//
//	go run ./hack/benchplots -in docs/bench/compare.json -out docs/bench
//
// (make bench-compare runs the comparison and this), or with -scale those of a scale run:
//
//	go run ./hack/benchplots -scale docs/bench/scale.json -out docs/bench
//
// (make bench-scale runs the scale measurement and this).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/baton-dev/baton/test/bench/compare"
	"github.com/baton-dev/baton/test/bench/plots"
)

func main() {
	in := flag.String("in", "docs/bench/compare.json", "JSON results of the comparison (-compare.json)")
	out := flag.String("out", "docs/bench", "directory for the PNG charts")
	scale := flag.String("scale", "", "JSON results of a scale run (-scale.json): draw its charts instead")
	flag.Parse()
	var err error
	if *scale != "" {
		var written []string
		written, err = writeScale(*scale, *out)
		for _, p := range written {
			fmt.Println("wrote", p)
		}
	} else {
		err = run(*in, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("%w (write it with make bench-compare, or go test ./test/bench/compare/ -compare.run -compare.json FILE)", err)
	}
	defer f.Close()
	res, err := compare.ReadResults(f)
	if err != nil {
		return err
	}
	written, err := plots.Write(out, res)
	for _, p := range written {
		fmt.Println("wrote", p)
	}
	return err
}
