package localcassandra

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTailFileDropsColours(t *testing.T) {
	p := filepath.Join(t.TempDir(), "install.log")
	if err := os.WriteFile(p, []byte("a\nb\n[ERROR] \x1b[1;31mfailed\x1b[m\n\x1b[0m\x1b[0m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := tailFile(p, 2), "b\n[ERROR] failed"; got != want {
		t.Errorf("tailFile = %q, want %q", got, want)
	}
}
