package ociimage

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// entry is what a test compares of one file read back from an image.
type entry struct {
	Name     string
	Type     byte
	Mode     fs.FileMode
	UID, GID int
	ModTime  time.Time
	Content  string
}

// testSpec returns a spec with a host file, data, an explicit directory, implied parents and
// every config field set.
func testSpec(t *testing.T) Spec {
	t.Helper()
	src := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(src, []byte("#!binary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Spec{
		Files: []File{
			{Path: "/usr/local/bin/app", Mode: 0o755, Source: src},
			{Path: "/etc/app/config", Data: []byte("key=value\n"), UID: 10, GID: 20},
			{Path: "/var/data", Mode: fs.ModeDir | 0o750, UID: 65532, GID: 65532},
			{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
			{Path: "/usr/local/bin/setuid", Mode: fs.ModeSetuid | 0o755, Data: []byte{}},
		},
		Config: Config{
			Entrypoint:   []string{"/usr/local/bin/app"},
			Cmd:          []string{"--flag"},
			User:         "65532:65532",
			Env:          []string{"PATH=/usr/local/bin", "A=b=c"},
			WorkingDir:   "/var/data",
			Labels:       map[string]string{"org.opencontainers.image.title": "app"},
			ExposedPorts: []string{"8080/tcp", "53/udp"},
		},
	}
}

func TestBuildReadBack(t *testing.T) {
	spec := testSpec(t)
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate.Image: %v", err)
	}
	path := filepath.Join(t.TempDir(), "images.tar")
	if err := WriteArchive(path, Tagged{Image: img, Tags: []string{"baton.local/app:test"}}); err != nil {
		t.Fatal(err)
	}
	back := readArchive(t, path, "baton.local/app:test")

	want := []entry{
		{Name: "etc", Type: tar.TypeDir, Mode: fs.ModeDir | 0o755},
		{Name: "etc/app", Type: tar.TypeDir, Mode: fs.ModeDir | 0o755},
		{Name: "etc/app/config", Type: tar.TypeReg, Mode: 0o644, UID: 10, GID: 20, Content: "key=value\n"},
		{Name: "tmp", Type: tar.TypeDir, Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Name: "usr", Type: tar.TypeDir, Mode: fs.ModeDir | 0o755},
		{Name: "usr/local", Type: tar.TypeDir, Mode: fs.ModeDir | 0o755},
		{Name: "usr/local/bin", Type: tar.TypeDir, Mode: fs.ModeDir | 0o755},
		{Name: "usr/local/bin/app", Type: tar.TypeReg, Mode: 0o755, Content: "#!binary\n"},
		{Name: "usr/local/bin/setuid", Type: tar.TypeReg, Mode: fs.ModeSetuid | 0o755},
		{Name: "var", Type: tar.TypeDir, Mode: fs.ModeDir | 0o755},
		{Name: "var/data", Type: tar.TypeDir, Mode: fs.ModeDir | 0o750, UID: 65532, GID: 65532},
	}
	for i := range want {
		want[i].ModTime = epoch
	}
	if diff := cmp.Diff(want, extract(t, back)); diff != "" {
		t.Errorf("files in the image (-want +got):\n%s", diff)
	}

	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Time.Equal(epoch) {
		t.Errorf("platform %s/%s created %v, want linux/amd64 created %v", cf.OS, cf.Architecture, cf.Created, epoch)
	}
	wantCfg := v1.Config{
		Entrypoint:   []string{"/usr/local/bin/app"},
		Cmd:          []string{"--flag"},
		User:         "65532:65532",
		Env:          []string{"PATH=/usr/local/bin", "A=b=c"},
		WorkingDir:   "/var/data",
		Labels:       map[string]string{"org.opencontainers.image.title": "app"},
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "53/udp": {}},
	}
	if diff := cmp.Diff(wantCfg, cf.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 {
		t.Errorf("%d layers and %d history entries, want 1 and 1", len(cf.RootFS.DiffIDs), len(cf.History))
	}
	wantDigest, _ := img.Digest()
	gotDigest, _ := back.Digest()
	if wantDigest != gotDigest {
		t.Errorf("digest read back %v, built %v", gotDigest, wantDigest)
	}
}

func TestBuildReproducible(t *testing.T) {
	spec := testSpec(t)
	digest := func(s Spec) v1.Hash {
		t.Helper()
		img, err := Build(s)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(spec)
	if again := digest(spec); again != first {
		t.Errorf("the same spec gave %v, then %v", first, again)
	}
	reordered := spec
	reordered.Files = slices.Clone(spec.Files)
	slices.Reverse(reordered.Files)
	if got := digest(reordered); got != first {
		t.Errorf("files listed in another order gave %v, want %v", got, first)
	}
	// The Source file's own time and mode on the host do not matter.
	src := spec.Files[0].Source
	if err := os.Chtimes(src, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := digest(spec); got != first {
		t.Errorf("touching the source file changed the digest to %v, want %v", got, first)
	}
	// Content, owner and config do.
	changed := []func(*Spec){
		func(s *Spec) { s.Files[1].Data = []byte("key=other\n") },
		func(s *Spec) { s.Files[1].UID = 11 },
		func(s *Spec) { s.Files[1].Mode = 0o600 },
		func(s *Spec) { s.Config.User = "0" },
	}
	for i, change := range changed {
		s := spec
		s.Files = slices.Clone(spec.Files)
		change(&s)
		if got := digest(s); got == first {
			t.Errorf("change %d left the digest at %v", i, got)
		}
	}
}

func TestBuildInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec Spec
		want []string
	}{
		{"relative path", Spec{Files: []File{{Path: "etc/x"}}}, []string{`path "etc/x"`}},
		{"unclean path", Spec{Files: []File{{Path: "/etc/../x"}}}, []string{`path "/etc/../x"`}},
		{"root", Spec{Files: []File{{Path: "/", Mode: fs.ModeDir}}}, []string{`path "/"`}},
		{"twice", Spec{Files: []File{{Path: "/a"}, {Path: "/a"}}}, []string{"/a is listed twice"}},
		{"symlink", Spec{Files: []File{{Path: "/a", Mode: fs.ModeSymlink | 0o777}}}, []string{"only regular files and directories"}},
		{"file as parent", Spec{Files: []File{{Path: "/a"}, {Path: "/a/b"}}}, []string{"/a is a file but /a/b is below it"}},
		{"dir with data", Spec{Files: []File{{Path: "/a", Mode: fs.ModeDir, Data: []byte("x")}}}, []string{"a directory has no Source or Data"}},
		{"source and data", Spec{Files: []File{{Path: "/a", Source: "/etc/hostname", Data: []byte("x")}}}, []string{"not both"}},
		{"negative owner", Spec{Files: []File{{Path: "/a", UID: -1}}}, []string{"owner -1:0"}},
		{"config", Spec{Config: Config{WorkingDir: "rel", Env: []string{"NOVALUE"}, ExposedPorts: []string{"80", "http/tcp", "80/icmp"}}},
			[]string{`working directory "rel"`, `"NOVALUE"`, `port "80"`, `port "http/tcp"`, `port "80/icmp"`}},
		{"every problem at once", Spec{Files: []File{{Path: "x"}, {Path: "/y", UID: -2}}}, []string{`path "x"`, "owner -2:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(tc.spec)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Build: %v, want ErrInvalidSpec", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	t.Run("missing source", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing")
		_, err := Build(Spec{Files: []File{{Path: "/a", Source: missing}}})
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "/a") {
			t.Fatalf("Build: %v, want fs.ErrNotExist naming /a", err)
		}
	})
}

func TestWriteArchive(t *testing.T) {
	a, err := Build(Spec{Files: []File{{Path: "/a", Data: []byte("a")}}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(Spec{Files: []File{{Path: "/b", Data: []byte("b")}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "images.tar")
	err = WriteArchive(path,
		Tagged{Image: a, Tags: []string{"baton.local/a:dev", "example.test/a:v1"}},
		Tagged{Image: b, Tags: []string{"baton.local/b:dev"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatal(err)
	}
	var tags [][]string
	for _, d := range m {
		got := slices.Clone(d.RepoTags)
		slices.Sort(got)
		tags = append(tags, got)
	}
	slices.SortFunc(tags, slices.Compare)
	if diff := cmp.Diff([][]string{{"baton.local/a:dev", "example.test/a:v1"}, {"baton.local/b:dev"}}, tags); diff != "" {
		t.Errorf("manifest.json tags (-want +got):\n%s", diff)
	}
	for tag, want := range map[string]v1.Image{"baton.local/a:dev": a, "example.test/a:v1": a, "baton.local/b:dev": b} {
		got := readArchive(t, path, tag)
		wd, _ := want.Digest()
		gd, _ := got.Digest()
		if wd != gd {
			t.Errorf("%s: digest %v, want %v", tag, gd, wd)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want the archive alone", entries, err)
	}

	for _, tc := range []struct {
		name   string
		images []Tagged
	}{
		{"no images", nil},
		{"no tag", []Tagged{{Image: a}}},
		{"no registry", []Tagged{{Image: a, Tags: []string{"a:dev"}}}},
		{"no tag part", []Tagged{{Image: a, Tags: []string{"baton.local/a"}}}},
		{"tag twice", []Tagged{{Image: a, Tags: []string{"baton.local/a:dev"}}, {Image: b, Tags: []string{"baton.local/a:dev"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.tar")
			if err := WriteArchive(bad, tc.images...); !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("WriteArchive: %v, want ErrInvalidSpec", err)
			}
			if _, err := os.Stat(bad); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the archive exists after an error (%v)", err)
			}
		})
	}
}

func TestNonrootBase(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bundle []byte
		env    []string
	}{
		{"with CA bundle", []byte("-----BEGIN CERTIFICATE-----\n"), []string{"PATH=" + DefaultPath, "SSL_CERT_FILE=" + CABundlePath}},
		{"without", nil, []string{"PATH=" + DefaultPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := NonrootBase(tc.bundle)
			img, err := Build(spec)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]entry{}
			for _, e := range extract(t, img) {
				files[e.Name] = e
			}
			if e := files["home/nonroot"]; e.UID != NonrootUID || e.GID != NonrootUID || e.Mode != fs.ModeDir|0o700 {
				t.Errorf("home/nonroot: %+v, want a 0700 directory of 65532:65532", e)
			}
			if e := files["tmp"]; e.Mode != fs.ModeDir|fs.ModeSticky|0o777 {
				t.Errorf("tmp: mode %v, want dtrwxrwxrwx", e.Mode)
			}
			if !strings.Contains(files["etc/passwd"].Content, "nonroot:x:65532:65532:nonroot:/home/nonroot:") {
				t.Errorf("/etc/passwd has no nonroot user:\n%s", files["etc/passwd"].Content)
			}
			if !strings.Contains(files["etc/group"].Content, "nonroot:x:65532:") {
				t.Errorf("/etc/group has no nonroot group:\n%s", files["etc/group"].Content)
			}
			if got := files[strings.TrimPrefix(CABundlePath, "/")].Content; got != string(tc.bundle) {
				t.Errorf("CA bundle %q, want %q", got, tc.bundle)
			}
			if spec.Config.User != "65532" || spec.Config.WorkingDir != NonrootHome || !slices.Equal(spec.Config.Env, tc.env) {
				t.Errorf("config %+v, want user 65532 in %s with env %q", spec.Config, NonrootHome, tc.env)
			}
		})
	}
}

// readArchive loads the image tagged tag from the docker-archive at path.
func readArchive(t *testing.T, path, tag string) v1.Image {
	t.Helper()
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		t.Fatalf("tarball.ImageFromPath(%s): %v", tag, err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("validate.Image(%s): %v", tag, err)
	}
	return img
}

// extract returns the image's flattened file system, in tar order.
func extract(t *testing.T, img v1.Image) []entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	var out []entry
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{
			Name: hdr.Name, Type: hdr.Typeflag, Mode: hdr.FileInfo().Mode(),
			UID: hdr.Uid, GID: hdr.Gid, ModTime: hdr.ModTime.UTC(), Content: string(b),
		})
	}
}
