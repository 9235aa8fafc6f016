package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const docPath = "../../docs/api/sidecar.openapi.yaml"

// TestCheck: -check fails on a missing or edited page, naming make api-docs, and passes on the
// page apidoc writes.
func TestCheck(t *testing.T) {
	out := filepath.Join(t.TempDir(), "sidecar.md")
	err := run(t.Context(), docPath, out, true)
	if !errors.Is(err, errStale) || !strings.Contains(err.Error(), "make api-docs") {
		t.Fatalf("check of a missing page: %v, want it stale with the command to run", err)
	}
	if err := run(t.Context(), docPath, out, false); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), docPath, out, true); err != nil {
		t.Fatalf("check of the page just written: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### POST /v1/locks/{lockID}/acquire", "| 409 |", "`held_by_pod`", "## Requests that match no route", "### LockStatus"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	edited := strings.Replace(string(b), "held_by_pod", "held_by_me", 1)
	if err := os.WriteFile(out, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(t.Context(), docPath, out, true); !errors.Is(err, errStale) {
		t.Fatalf("check of an edited page: %v, want it stale", err)
	}
}

// TestInvalidDocument: a document kin-openapi finds invalid, or with an operation without a tag,
// fails before anything is written.
func TestInvalidDocument(t *testing.T) {
	dir := t.TempDir()
	for name, doc := range map[string]string{
		"no responses": "openapi: 3.0.3\ninfo: {title: t, version: v1}\npaths:\n  /x:\n    get: {}\n",
		"no tag":       "openapi: 3.0.3\ninfo: {title: t, version: v1}\nx-unrouted-responses: {}\npaths:\n  /x:\n    get:\n      responses:\n        \"200\": {description: ok}\n",
	} {
		in := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		out := in + ".md"
		if err := os.WriteFile(in, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := run(t.Context(), in, out, false); err == nil {
			t.Errorf("%s: rendered without error", name)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: wrote %s (%v)", name, out, err)
		}
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"GET /v1/locks/{lockID}/acquire": "get-v1lockslockidacquire",
		"LockStatus":                     "lockstatus",
		"Requests that match no route":   "requests-that-match-no-route",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
