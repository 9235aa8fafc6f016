package sbom

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

const repoRoot = "../../.."

// goCmd runs the go command in the module root, as the Makefile's BUILD line does (CGO_ENABLED=0,
// linux), and returns its output.
func goCmd(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, &stderr)
	}
	return string(out)
}

// goSum returns go.sum's h1 hash of each module version, by "path version".
func goSum(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && !strings.HasSuffix(fields[1], "/go.mod") {
			sums[fields[0]+" "+fields[1]] = fields[2]
		}
	}
	return sums
}

// goModRequires returns go.mod's direct requirements, path -> version.
func goModRequires(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := map[string]string{}
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			in = true
		case line == ")":
			in = false
		case in && !strings.Contains(line, "// indirect"):
			if f := strings.Fields(line); len(f) >= 2 {
				reqs[f[0]] = f[1]
			}
		}
	}
	return reqs
}

// TestNewListsGoModDependencies builds the baton binaries with the Makefile's flags and checks
// their SBOM against the go command: every module the binaries link (go list -deps), with the
// version go.mod selects and go.sum's hash, the Go version, the main module and the build
// settings. Seconds with a warm build cache.
func TestNewListsGoModDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the baton binaries")
	}
	bin := t.TempDir()
	goCmd(t, "build", "-trimpath", "-ldflags=-s -w", "-o", bin+"/", "./cmd/...")
	entries, err := os.ReadDir(bin)
	if err != nil {
		t.Fatal(err)
	}
	img := Image{Ref: "baton.local/baton:dev", Digest: "sha256:" + strings.Repeat("ab", 32), ID: "sha256:" + strings.Repeat("cd", 32)}
	for _, e := range entries {
		img.Binaries = append(img.Binaries, Binary{Path: "/usr/local/bin/" + e.Name(), File: filepath.Join(bin, e.Name())})
	}
	if len(img.Binaries) < 3 {
		t.Fatalf("built %d binaries, want operator, sidecar and baton at least", len(img.Binaries))
	}
	first := validSBOM(t, img)
	buf := bytes.NewReader(first)
	var back cdx.BOM // what a reader of the file sees
	if err := cdx.NewBOMDecoder(buf, cdx.BOMFileFormatJSON).Decode(&back); err != nil {
		t.Fatal(err)
	}
	if back.SpecVersion != SpecVersion || back.Metadata == nil || back.Metadata.Component == nil || back.Components == nil || back.Dependencies == nil {
		t.Fatalf("incomplete BOM: spec %v, metadata %+v", back.SpecVersion, back.Metadata)
	}
	byRef := map[string]cdx.Component{}
	for _, c := range *back.Components {
		if _, dup := byRef[c.BOMRef]; dup {
			t.Errorf("component %s listed twice", c.BOMRef)
		}
		byRef[c.BOMRef] = c
	}
	dependsOn := map[string][]string{}
	for _, d := range *back.Dependencies {
		if d.Dependencies != nil {
			dependsOn[d.Ref] = *d.Dependencies
		}
	}

	// The go command's view: the modules linked into ./cmd/... and their selected versions.
	sums := goSum(t)
	linked := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(goCmd(t, "list", "-deps", "-f",
		"{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", "./cmd/...")), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			linked[f[0]] = f[1]
		}
	}
	if len(linked) < 20 {
		t.Fatalf("go list found %d linked modules: the check would prove little", len(linked))
	}
	for mod, version := range linked {
		ref := goPURL(mod, version)
		c, ok := byRef[ref]
		if !ok {
			t.Errorf("the SBOM does not list %s %s, which the binaries link", mod, version)
			continue
		}
		sum := sums[mod+" "+version]
		wantHash, _ := h1Hex(sum)
		if c.Name != mod || c.Version != version || c.Type != cdx.ComponentTypeLibrary {
			t.Errorf("%s: listed as %s %s %s", ref, c.Type, c.Name, c.Version)
		}
		if got := propOf(c, PropGoSum); got != sum || sum == "" {
			t.Errorf("%s %s: %s = %q, go.sum has %q", mod, version, PropGoSum, got, sum)
		}
		if c.Hashes == nil || len(*c.Hashes) != 1 || (*c.Hashes)[0] != (cdx.Hash{Algorithm: cdx.HashAlgoSHA256, Value: wantHash}) {
			t.Errorf("%s %s: hashes %v, want SHA-256 %s (go.sum's %s)", mod, version, c.Hashes, wantHash, sum)
		}
	}
	// go.mod's direct requirements that the binaries link are there at go.mod's version.
	direct := 0
	for mod, version := range goModRequires(t) {
		if _, ok := linked[mod]; !ok {
			continue // test-only or tool requirement
		}
		direct++
		if _, ok := byRef[goPURL(mod, version)]; !ok {
			t.Errorf("go.mod requires %s %s; the SBOM does not list it", mod, version)
		}
	}
	if direct < 5 {
		t.Errorf("only %d of go.mod's direct requirements are linked: go.mod parsing is off", direct)
	}

	goVersion := strings.TrimSpace(goCmd(t, "env", "GOVERSION"))
	std, ok := byRef[goPURL("std", goVersion)]
	if !ok || std.Version != goVersion {
		t.Errorf("no std component at %s", goVersion)
	}
	meta := *back.Metadata.Component
	if meta.Type != cdx.ComponentTypeContainer || meta.Name != "baton.local/baton" || meta.Version != "dev" || propOf(meta, PropImageDigest) != img.Digest || propOf(meta, PropImageID) != img.ID {
		t.Errorf("metadata component %+v does not describe %+v", meta, img)
	}
	for _, b := range img.Binaries {
		c, ok := byRef["binary:"+b.Path]
		if !ok {
			t.Errorf("no component for %s", b.Path)
			continue
		}
		for name, want := range map[string]string{
			PropPath: b.Path, PropGoVersion: goVersion, PropMainModule: "github.com/baton-dev/baton",
			PropMainPackage:               "github.com/baton-dev/baton/cmd/" + filepath.Base(b.Path),
			PropBuildPrefix + "-trimpath": "true", PropBuildPrefix + "CGO_ENABLED": "0", PropBuildPrefix + "GOOS": "linux",
		} {
			if got := propOf(c, name); got != want {
				t.Errorf("%s: %s = %q, want %q", b.Path, name, got, want)
			}
		}
		deps := dependsOn[c.BOMRef]
		for _, d := range deps {
			if _, ok := byRef[d]; !ok {
				t.Errorf("%s depends on %s, which is not a component", b.Path, d)
			}
		}
		if len(deps) < 10 || deps[0] == "" {
			t.Errorf("%s depends on %d components", b.Path, len(deps))
		}
	}
	if got := dependsOn[meta.BOMRef]; len(got) != len(img.Binaries) {
		t.Errorf("the image depends on %v, want its %d binaries", got, len(img.Binaries))
	}

	// The same image gives the same bytes.
	if again := validSBOM(t, img); !bytes.Equal(first, again) {
		t.Error("two SBOMs of the same image differ")
	}
}

func TestNewNotAGoBinary(t *testing.T) {
	f := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(f, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(Image{Ref: "baton.local/x:dev", Binaries: []Binary{{Path: "/script", File: f}}})
	if !errors.Is(err, ErrNotGoBinary) || !strings.Contains(err.Error(), "/script") {
		t.Errorf("New: %v, want ErrNotGoBinary naming /script", err)
	}
}

func TestPURLs(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{goPURL("github.com/CycloneDX/cyclonedx-go", "v0.12.0"), "pkg:golang/github.com/CycloneDX/cyclonedx-go@v0.12.0"},
		{goPURL("github.com/x/y", "v2.0.0+incompatible"), "pkg:golang/github.com/x/y@v2.0.0+incompatible"},
		{goPURL("github.com/baton-dev/baton", "(devel)"), "pkg:golang/github.com/baton-dev/baton"},
		{goPURL("std", "go1.26.8"), "pkg:golang/std@go1.26.8"},
		{ociPURL("baton.local/baton", "dev", "sha256:ab"), "pkg:oci/baton@sha256:ab?repository_url=baton.local%2Fbaton&tag=dev"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	if r, tag := splitRef("localhost:5000/baton"); r != "localhost:5000/baton" || tag != "" {
		t.Errorf("splitRef took the port for a tag: %s %s", r, tag)
	}
}

// propOf returns c's property called name, or "".
func propOf(c cdx.Component, name string) string {
	if c.Properties == nil {
		return ""
	}
	for _, p := range *c.Properties {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}
