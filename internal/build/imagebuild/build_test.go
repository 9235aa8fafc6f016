package imagebuild

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// TestBuildAll builds every image from source (minutes with a cold Go build cache, seconds with
// a warm one), reads them back from the archive and runs the pause binary taken from its image.
// (ociimage's tests show that the digests repeat.)
func TestBuildAll(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the baton binaries")
	}
	out := t.TempDir()
	var progress bytes.Buffer
	res, err := BuildAll(t.Context(), out, WithProgress(&progress), WithCABundle(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("progress:\n%s", &progress)
	if res.Archive != filepath.Join(out, ArchiveName) {
		t.Errorf("archive %s, want %s", res.Archive, filepath.Join(out, ArchiveName))
	}
	var tags []string
	for _, img := range res.Images {
		tags = append(tags, img.Tag)
	}
	if diff := cmp.Diff([]string{BatonTag, PauseTag, DemoAppTag}, tags); diff != "" {
		t.Fatalf("images (-want +got):\n%s", diff)
	}
	for _, want := range []string{"imagebuild: building baton binaries baton, operator, sidecar", "imagebuild: built pause in", "imagebuild: wrote " + res.Archive} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress does not say %q", want)
		}
	}

	files := map[string]map[string]entry{}
	for _, img := range res.Images {
		ref, err := name.NewTag(img.Tag)
		if err != nil {
			t.Fatal(err)
		}
		back, err := tarball.ImageFromPath(res.Archive, &ref)
		if err != nil {
			t.Fatalf("%s: %v", img.Tag, err)
		}
		var fast []validate.Option
		if img.Tag == BatonTag {
			fast = append(fast, validate.Fast) // its 75 MB layer takes half a minute under -race
		}
		if err := validate.Image(back, fast...); err != nil {
			t.Errorf("%s: %v", img.Tag, err)
		}
		d, _ := back.Digest()
		id, _ := back.ConfigName()
		if d.String() != img.Digest || id.String() != img.ID || img.Size <= 0 {
			t.Errorf("%s in the archive: digest %s, id %s; BuildAll said %+v", img.Tag, d, id, img)
		}
		cf, err := back.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s entrypoint %q user %q", img.Tag, img.Digest, cf.Config.Entrypoint, cf.Config.User)
		files[img.Tag] = map[string]entry{}
		for _, e := range extract(t, back) {
			files[img.Tag][e.Name] = e
		}
	}
	checkSBOMs(t, out, res, files)
	for _, tc := range []struct {
		tag   string
		paths []string
	}{
		{BatonTag, []string{"usr/local/bin/sidecar", "usr/local/bin/operator", "usr/local/bin/baton", "etc/passwd"}},
		{PauseTag, []string{"pause"}},
		{DemoAppTag, []string{"usr/local/bin/demoapp", "etc/passwd"}},
	} {
		for _, p := range tc.paths {
			if e, ok := files[tc.tag][p]; !ok || len(e.Content) == 0 {
				t.Errorf("%s has no %s", tc.tag, p)
			}
		}
	}
	if len(files[PauseTag]) != 1 {
		t.Errorf("the pause image holds %d files, want /pause alone", len(files[PauseTag]))
	}

	// The pause binary from the image is static and behaves.
	pause := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(pause, files[PauseTag]["pause"].Content, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(pause)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("the image's /pause ended with %v after SIGTERM, want exit status 0", err)
	}
}

func TestBuildAllErrors(t *testing.T) {
	t.Run("not the module root", func(t *testing.T) {
		_, err := BuildAll(t.Context(), t.TempDir(), WithSourceDir(t.TempDir()))
		if err == nil || !strings.Contains(err.Error(), "module root") {
			t.Errorf("BuildAll: %v, want an error about the module root", err)
		}
	})
	t.Run("missing CA bundle", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds pause and demoapp")
		}
		bins := t.TempDir()
		names, err := BatonBinaries(repoRoot)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(bins, n), []byte(n), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		_, err = BuildAll(t.Context(), t.TempDir(), WithBatonBinaries(bins), WithCABundle(filepath.Join(bins, "none.pem")))
		if err == nil || !strings.Contains(err.Error(), "CA bundle") {
			t.Errorf("BuildAll: %v, want an error about the CA bundle", err)
		}
	})
	t.Run("missing baton binary", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds pause and demoapp")
		}
		_, err := BuildAll(t.Context(), t.TempDir(), WithBatonBinaries(t.TempDir()), WithCABundle(""))
		if err == nil || !strings.Contains(err.Error(), BatonTag) || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("BuildAll: %v, want an error naming %s and the missing file", err, BatonTag)
		}
	})
}
