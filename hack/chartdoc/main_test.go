package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testSchema = `{
  "type": "object",
  "additionalProperties": false,
  "definitions": {
    "duration": {"description": "a Go duration such as 10s", "type": "string"},
    "pullPolicy": {"type": "string", "enum": ["Always", "Never"]}
  },
  "properties": {
    "replicas": {"type": "integer", "minimum": 1},
    "port": {"type": "integer", "anyOf": [{"const": 0}, {"minimum": 1024, "maximum": 65535}]},
    "interval": {"$ref": "#/definitions/duration"},
    "hosts": {
      "description": "contact points",
      "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]
    },
    "image": {
      "allOf": [
        {"type": "object", "properties": {"pullPolicy": {"$ref": "#/definitions/pullPolicy"}}},
        {"properties": {"repository": {"type": "string"}}}
      ]
    },
    "resources": {"type": "object"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "issuer": {"type": "object", "properties": {"name": {"type": "string"}}},
    "secret": {"type": "string"}
  }
}`

const testValues = `# The document's own comment, not a key's.

# Operator replicas.
replicas: 2
# A port;
# 0 turns it off.
port: 0
interval: 10s
hosts: []
# The image.
image:
  repository: example.com/baton
  pullPolicy: Never
# Resources: a free map, one row.
resources:
  requests: {cpu: 50m}
labels:
  grafana_dashboard: "1"
# Who issues:
#   self  the operator
issuer: {}
secret: ""
`

func TestRowsFromValuesAndSchema(t *testing.T) {
	rows, err := Rows([]byte(testValues), []byte(testSchema))
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Key: "replicas", Type: "integer ≥ 1", Default: "2", Description: "Operator replicas."},
		{Key: "port", Type: "integer: `0` or 1024–65535", Default: "0", Description: "A port; 0 turns it off."},
		{Key: "interval", Type: "string (a Go duration such as 10s)", Default: "10s"},
		{Key: "hosts", Type: "list of string or string", Default: "[]", Description: "contact points"},
		{Key: "image", Type: "object", Description: "The image."},
		{Key: "image.repository", Type: "string", Default: "example.com/baton"},
		{Key: "image.pullPolicy", Type: "one of `Always`, `Never`", Default: "Never"},
		{Key: "resources", Type: "map", Default: "{requests: {cpu: 50m}}", Description: "Resources: a free map, one row."},
		{Key: "labels", Type: "map of string", Default: `{grafana_dashboard: "1"}`},
		{Key: "issuer", Type: "map", Default: "{}", Description: "Who issues:<br>&nbsp;&nbsp;self  the operator"},
		{Key: "secret", Type: "string", Default: `""`},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d:\n%+v", len(rows), len(want), rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d:\n got  %+v\n want %+v", i, rows[i], want[i])
		}
	}
}

func TestRowsRejectAKeyTheSchemaLacks(t *testing.T) {
	_, err := Rows([]byte("image:\n  tga: v1\n"), []byte(testSchema))
	if err == nil || !strings.Contains(err.Error(), "image.tga") {
		t.Fatalf("got %v, want an error naming image.tga", err)
	}
}

func TestTableEscapesPipes(t *testing.T) {
	got := string(Table([]Row{{Key: "a", Type: "string", Default: "x|y", Description: "one | two"}}))
	want := "| Key | Type | Default | Description |\n|---|---|---|---|\n| `a` | string | `x\\|y` | one \\| two |\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestSplice(t *testing.T) {
	readme := []byte("# chart\n\n" + beginMarker + "\nold\n" + endMarker + "\nafter\n")
	got, err := Splice(readme, []byte("new\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := "# chart\n\n" + beginMarker + "\nnew\n" + endMarker + "\nafter\n"
	if string(got) != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := Splice([]byte("# chart\n"), nil); !errors.Is(err, ErrNoMarkers) {
		t.Fatalf("without markers: got %v, want ErrNoMarkers", err)
	}
}

// TestCheckFailsUntilRegenerated runs the command on a chart of its own: -check fails on a stale
// README and names the command that fixes it; a run without -check writes it; -check then passes.
func TestCheckFailsUntilRegenerated(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("values.yaml", testValues)
	write("values.schema.json", testSchema)
	write("README.md", "# chart\n"+beginMarker+"\n"+endMarker+"\n")

	var stdout, stderr bytes.Buffer
	if code := run([]string{"-chart", dir, "-check"}, &stdout, &stderr); code != 1 {
		t.Fatalf("-check on a stale README: exit %d, want 1 (stderr %q)", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "make chart-docs") {
		t.Errorf("-check says %q; want it to name make chart-docs", stderr.String())
	}
	if code := run([]string{"-chart", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("regenerating: exit %d (stderr %q)", code, stderr.String())
	}
	got, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), "| `image.pullPolicy` | one of `Always`, `Never` | `Never` |  |\n") {
		t.Errorf("regenerated README lacks the image.pullPolicy row:\n%s", got)
	}
	stderr.Reset()
	if code := run([]string{"-chart", dir, "-check"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-check after regenerating: exit %d (stderr %q)", code, stderr.String())
	}
	write("values.yaml", strings.Replace(testValues, "replicas: 2", "replicas: 3", 1))
	if code := run([]string{"-chart", dir, "-check"}, &stdout, &stderr); code != 1 {
		t.Fatalf("-check after a default changed: exit %d, want 1", code)
	}
}

// TestChartReadmeIsCurrent is make check's chart-docs step as a test, so that make test-short
// catches a values.yaml edit without make chart-docs too.
func TestChartReadmeIsCurrent(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-chart", "../../charts/baton", "-check"}, &stdout, &stderr); code != 0 {
		t.Fatalf("%s", stderr.String())
	}
}
