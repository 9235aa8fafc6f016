package sbom

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xeipuuv/gojsonschema"
)

// validateSchema fails the test unless bom (JSON) is valid CycloneDX 1.6 by the schema that
// cyclonedx-go ships (read from the module cache, where go list says it is). The schemas it refers
// to (SPDX licence ids, JSF signatures) are registered under their $id, so nothing is fetched.
func validateSchema(t *testing.T, bom []byte) {
	t.Helper()
	dir := strings.TrimSpace(goCmd(t, "list", "-m", "-f", "{{.Dir}}", "github.com/CycloneDX/cyclonedx-go"))
	file := func(name string) gojsonschema.JSONLoader {
		p := filepath.Join(dir, "schema", name)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("CycloneDX schema: %v", err)
		}
		return gojsonschema.NewReferenceLoader("file://" + filepath.ToSlash(p))
	}
	sl := gojsonschema.NewSchemaLoader()
	for id, name := range map[string]string{
		"http://cyclonedx.org/schema/spdx.schema.json":     "spdx.schema.json",
		"http://cyclonedx.org/schema/jsf-0.82.schema.json": "jsf-0.82.schemax.json",
	} {
		if err := sl.AddSchema(id, file(name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	schema, err := sl.Compile(file("bom-1.6.schema.json"))
	if err != nil {
		t.Fatalf("compile the CycloneDX 1.6 schema: %v", err)
	}
	res, err := schema.Validate(gojsonschema.NewBytesLoader(bom))
	if err != nil {
		t.Fatalf("validate: %v", err)
	}
	for _, e := range res.Errors() {
		t.Errorf("not valid CycloneDX 1.6: %s", e)
	}
}

// TestWriteIsValidCycloneDX describes an image holding this test binary (a Go binary with build
// information) and checks the JSON against the CycloneDX 1.6 schema.
func TestWriteIsValidCycloneDX(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []Image{
		{Ref: "localhost:5000/baton/test:v1", Digest: "sha256:" + strings.Repeat("0f", 32), ID: "sha256:" + strings.Repeat("e1", 32),
			Binaries: []Binary{{Path: "/usr/local/bin/sbom.test", File: exe}}},
		{Ref: "baton.local/empty"}, // no tag, no digest, no binaries
	} {
		validSBOM(t, img)
	}
}

// validSBOM returns the SBOM of img as Write writes it, after checking it against the schema.
func validSBOM(t *testing.T, img Image) []byte {
	t.Helper()
	bom, err := New(img)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, bom); err != nil {
		t.Fatal(err)
	}
	validateSchema(t, buf.Bytes())
	return buf.Bytes()
}
