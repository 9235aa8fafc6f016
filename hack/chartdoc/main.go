// Command chartdoc writes the table of a Helm chart's values into the chart's README.md, from
// values.yaml (keys, defaults and the comments above them) and values.schema.json (types and
// allowed values):
//
//	go run ./hack/chartdoc [-chart charts/baton] [-check]
//
// The table replaces what lies between the lines "<!-- BEGIN VALUES -->" and "<!-- END VALUES -->"
// of README.md; the rest of the README is written by hand. With -check it writes nothing and
// exits 1 when the README differs from what it would write, saying which command regenerates it
// (make check runs it so; make chart-docs writes it).
//
// A key is a row of its own, and the keys below it are not, unless the schema lists the key's
// properties: then it is a row only when values.yaml has a comment on it, and its children are
// rows. A key of values.yaml that the schema does not describe is an error, since helm would refuse
// it.
//
// What it does not do: render templates, check that a default passes the schema (helm lint and
// the chart's tests do), or describe schema properties that values.yaml leaves out.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run parses the flags, regenerates or checks the README and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chartdoc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	chart := fs.String("chart", "charts/baton", "the chart's directory (values.yaml, values.schema.json, README.md)")
	check := fs.Bool("check", false, "write nothing; exit 1 when README.md is stale")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	readmePath := filepath.Join(*chart, "README.md")
	current, want, err := render(*chart)
	if err != nil {
		fmt.Fprintf(stderr, "chartdoc: %v\n", err)
		return 1
	}
	if bytes.Equal(current, want) {
		return 0
	}
	if *check {
		fmt.Fprintf(stderr, "chartdoc: %s is stale: its values table differs from %s and %s; run make chart-docs\n",
			readmePath, filepath.Join(*chart, "values.yaml"), filepath.Join(*chart, "values.schema.json"))
		return 1
	}
	if err := os.WriteFile(readmePath, want, 0o644); err != nil {
		fmt.Fprintf(stderr, "chartdoc: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "chartdoc: wrote %s\n", readmePath)
	return 0
}

// render reads the chart's README.md, values.yaml and values.schema.json and returns the README
// as it is and as it should be.
func render(chart string) (current, want []byte, err error) {
	current, err = os.ReadFile(filepath.Join(chart, "README.md"))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the README (it must exist, with the lines %q and %q): %w", beginMarker, endMarker, err)
	}
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		return nil, nil, err
	}
	schema, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		return nil, nil, err
	}
	rows, err := Rows(values, schema)
	if err != nil {
		return nil, nil, err
	}
	want, err = Splice(current, Table(rows))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Join(chart, "README.md"), err)
	}
	return current, want, nil
}

const (
	beginMarker = "<!-- BEGIN VALUES -->"
	endMarker   = "<!-- END VALUES -->"
)

// ErrNoMarkers is returned by Splice when the README lacks the marker lines around the table.
var ErrNoMarkers = errors.New("chartdoc: README lacks the marker lines " + beginMarker + " and " + endMarker)

// Splice returns readme with what lies between the marker lines replaced by table. It does not
// check that the markers appear only once: the first of each counts.
func Splice(readme, table []byte) ([]byte, error) {
	begin := bytes.Index(readme, []byte(beginMarker+"\n"))
	end := bytes.Index(readme, []byte(endMarker))
	if begin < 0 || end < begin {
		return nil, ErrNoMarkers
	}
	begin += len(beginMarker) + 1
	out := make([]byte, 0, len(readme)+len(table))
	out = append(out, readme[:begin]...)
	out = append(out, table...)
	return append(out, readme[end:]...), nil
}
