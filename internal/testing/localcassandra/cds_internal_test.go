package localcassandra

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCDSArgs: without an archive in the cache node 0 writes one on exit and the others run
// without; with one every node maps it; without an archive path nothing is added.
func TestCDSArgs(t *testing.T) {
	cfg := Config{Name: "cds", Nodes: 3, RunDir: t.TempDir()}
	archive := filepath.Join(t.TempDir(), "cds", "x.jsa")
	if got := cfg.cdsArgs("", 0); got != nil {
		t.Errorf("no archive path: %q, want nothing", got)
	}
	first := cfg.cdsArgs(archive, 0)
	if want := "-XX:ArchiveClassesAtExit=" + filepath.Join(cfg.nodeDir(0), cdsArchiveFile); !slices.Contains(first, want) {
		t.Errorf("node 0 without an archive: %q, want %s", first, want)
	}
	if got := cfg.cdsArgs(archive, 1); got != nil {
		t.Errorf("node 1 without an archive: %q, want nothing", got)
	}
	if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, []byte("archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got := cfg.cdsArgs(archive, i)
		if !slices.Contains(got, "-XX:SharedArchiveFile="+archive) || !slices.Contains(got, "-XX:+AllowArchivingWithJavaAgent") {
			t.Errorf("node %d with an archive: %q, want it mapped (with the java agent allowed)", i, got)
		}
	}
}

// TestKeepCDSArchive: node 0's archive is copied into the cache when the cache has none, never over
// one it has, and no archive of node 0 is no error.
func TestKeepCDSArchive(t *testing.T) {
	cfg := Config{Name: "cds", Nodes: 1, RunDir: t.TempDir()}
	archive := filepath.Join(t.TempDir(), "cds", "x.jsa")
	if err := cfg.keepCDSArchive(archive); err != nil {
		t.Fatalf("without node 0's archive: %v", err)
	}
	if _, err := os.Stat(archive); !os.IsNotExist(err) {
		t.Fatalf("the cache has an archive no node wrote: %v", err)
	}
	if err := os.MkdirAll(cfg.nodeDir(0), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(content string) {
		if err := os.WriteFile(filepath.Join(cfg.nodeDir(0), cdsArchiveFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	if err := cfg.keepCDSArchive(archive); err != nil {
		t.Fatal(err)
	}
	write("second")
	if err := cfg.keepCDSArchive(archive); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(archive)
	if err != nil || string(got) != "first" {
		t.Errorf("cache holds %q (%v), want the first archive, kept", got, err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(archive), ".tmp-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %s", strings.Join(left, " "))
	}
}
