package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"

	"github.com/baton-dev/baton/internal/build/imagebuild"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

const repoRoot = "../../.."

func TestValidateVersion(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.2.3", "v10.20.30", "v1.2.3-rc.1", "v1.0.0-alpha-a.b-c", "v0.0.0-e2e"} {
		if err := ValidateVersion(v); err != nil {
			t.Errorf("ValidateVersion(%q): %v", v, err)
		}
	}
	for _, tc := range []struct{ v, says string }{
		{"", "set VERSION=vX.Y.Z"},
		{"1.2.3", "no leading v: want v1.2.3"},
		{"v1.2", "vMAJOR.MINOR.PATCH"},
		{"v1.2.3.4", "vMAJOR.MINOR.PATCH"},
		{"v01.2.3", "vMAJOR.MINOR.PATCH"},
		{"v1.2.3-", "vMAJOR.MINOR.PATCH"},
		{"v1.2.3-rc.01", "vMAJOR.MINOR.PATCH"},
		{"V1.2.3", "no leading v"},
		{"v1.2.3+build.5", "build metadata"},
		{"v1.2.3 ", "vMAJOR.MINOR.PATCH"},
	} {
		err := ValidateVersion(tc.v)
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("ValidateVersion(%q) = %v, want ErrVersion saying %q", tc.v, err, tc.says)
		}
	}
}

// TestCommit: a clean checkout gives its commit; any change (modified, staged, untracked) is
// refused, naming the file and the override, unless allowed, and then the commit says -dirty.
func TestCommit(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "a")
	run("commit", "-q", "-m", "a")
	sha := run("rev-parse", "HEAD")
	if got, err := Commit(t.Context(), dir, false, io.Discard); err != nil || got != sha {
		t.Fatalf("clean tree: %q, %v; want %s", got, err, sha)
	}
	for _, change := range []func(){
		func() { _ = os.WriteFile(filepath.Join(dir, "a"), []byte("b"), 0o644) },
		func() { run("add", "a") },
		func() { run("commit", "-q", "-m", "b"); _ = os.WriteFile(filepath.Join(dir, "new"), nil, 0o644) },
	} {
		change()
		sha = run("rev-parse", "HEAD")
		_, err := Commit(t.Context(), dir, false, io.Discard)
		if !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "ALLOW_DIRTY=1") {
			t.Errorf("dirty tree: %v, want ErrDirty naming ALLOW_DIRTY=1", err)
		}
		var progress bytes.Buffer
		got, err := Commit(t.Context(), dir, true, &progress)
		if err != nil || got != sha+"-dirty" || !strings.Contains(progress.String(), "WARNING") {
			t.Errorf("dirty tree allowed: %q, %v (said %q); want %s-dirty and a warning", got, err, &progress, sha)
		}
	}
	if _, err := Commit(t.Context(), t.TempDir(), true, io.Discard); err == nil {
		t.Error("no checkout: no error")
	}
}

// TestBuild writes a release of this checkout with the real helm and stand-in binaries (one small
// Go program under each baton binary's name: the SBOM needs Go build information; make test
// builds the real binaries elsewhere, and the end-to-end suite runs the released image's). It
// checks the files, their sums, the chart's versions and image, and the archive's image.
func TestBuild(t *testing.T) {
	helm := testenv.Helm(t)
	bins := standInBinaries(t)
	out := t.TempDir()
	var progress bytes.Buffer
	res, err := Build(t.Context(), Config{
		Version: "v1.2.3-rc.1", SourceDir: repoRoot, OutDir: out, Helm: helm, AllowDirty: true, Progress: &progress,
		ImageOptions: []imagebuild.Option{imagebuild.WithBatonBinaries(bins), imagebuild.WithCABundle("")},
	})
	t.Logf("progress:\n%s", &progress)
	if err != nil {
		t.Fatal(err)
	}
	if res.Dir != filepath.Join(out, "v1.2.3-rc.1") || res.ChartVersion != "1.2.3-rc.1" {
		t.Errorf("dir %s, chart version %s", res.Dir, res.ChartVersion)
	}
	for _, want := range []string{"release: building the image ghcr.io/baton-dev/baton:v1.2.3-rc.1", "release: packaging the chart", "release: wrote " + res.Dir} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress does not say %q", want)
		}
	}
	entries, err := os.ReadDir(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := "SHA256SUMS baton-1.2.3-rc.1.tgz baton-image-v1.2.3-rc.1.cdx.json baton-image-v1.2.3-rc.1.tar"; strings.Join(names, " ") != want {
		t.Errorf("the release holds %v, want %s", names, want)
	}

	// sha256sum -c agrees with the sums.
	cmd := exec.Command("sha256sum", "-c", SumsFile)
	cmd.Dir = res.Dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != 3 {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}

	// The chart: version and appVersion from the release, so its image defaults to the release's.
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(tgzFile(t, res.Chart, "baton/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != "1.2.3-rc.1" || chart.AppVersion != "1.2.3-rc.1" {
		t.Errorf("Chart.yaml: version %q appVersion %q, want 1.2.3-rc.1 both", chart.Version, chart.AppVersion)
	}
	tmpl, err := exec.Command(helm, "template", "baton", res.Chart, "--set", "cassandra.hosts={cassandra}",
		"--set", "cassandra.allowAnonymous=true").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, tmpl)
	}
	if !strings.Contains(string(tmpl), `image: "`+res.Image.Tag+`"`) {
		t.Errorf("helm template of the packaged chart does not run %s", res.Image.Tag)
	}

	// The archive holds the image under the chart's repository and the release's tag.
	tag, err := name.NewTag("ghcr.io/baton-dev/baton:v1.2.3-rc.1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(res.ImageArchive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := img.Digest(); d.String() != res.Image.Digest || res.Image.Tag != tag.String() {
		t.Errorf("archive: %s %s; Build said %+v", tag, d, res.Image)
	}
	if st, err := os.Stat(res.SBOM); err != nil || st.Size() == 0 {
		t.Errorf("SBOM: %v", err)
	}

	// A second run replaces the first.
	if _, err := Build(t.Context(), Config{
		Version: "v1.2.3-rc.1", SourceDir: repoRoot, OutDir: out, Helm: helm, AllowDirty: true,
		ImageOptions: []imagebuild.Option{imagebuild.WithBatonBinaries(bins), imagebuild.WithCABundle("")},
	}); err != nil {
		t.Fatalf("second run: %v", err)
	}
}

func TestBuildRefusesBadVersion(t *testing.T) {
	out := t.TempDir()
	_, err := Build(t.Context(), Config{Version: "1.2.3", SourceDir: repoRoot, OutDir: out, Helm: "helm"})
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("Build: %v, want ErrVersion", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("Build wrote %v before refusing", entries)
	}
}

// standInBinaries builds a small Go program once and copies it under each baton binary's name.
func standInBinaries(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.test/standin\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "standin")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	names, err := imagebuild.BatonBinaries(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tgzFile returns the content of file name in the gzip'd tarball at path.
func tgzFile(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("%s has no %s: %v", path, name, err)
		}
		if hdr.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
