package imagebuild

// The baton image is built twice over: by the Dockerfile (docker build) and by BatonSpec (make
// image). These tests fail when one is edited without the other, and when the build command here
// drifts from the Makefile's BUILD line.

import (
	"bufio"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/baton-dev/baton/internal/build/ociimage"
)

const repoRoot = "../../.."

// distrolessNonroot is the base ociimage.NonrootBase stands in for.
const distrolessNonroot = "gcr.io/distroless/static-debian12:nonroot"

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
	line int
}

// stage is one FROM and the instructions after it.
type stage struct {
	from, name string
	body       []instruction
}

// parseDockerfile splits the Dockerfile at path into stages. It knows comments, blank lines and
// backslash continuations: enough for baton's Dockerfile, not every Dockerfile.
func parseDockerfile(t *testing.T, path string) []stage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var stages []stage
	var pending string
	start, n := 0, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if pending == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if pending == "" {
			start = n
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		full := pending + line
		pending = ""
		cmd, args, _ := strings.Cut(full, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			fields := strings.Fields(in.args)
			st := stage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("%s:%d: %s before the first FROM", path, in.line, in.cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stages) == 0 {
		t.Fatalf("%s has no FROM", path)
	}
	return stages
}

// execForm parses a JSON-array ENTRYPOINT or CMD.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Fatalf("Dockerfile:%d: %s %s is not in exec form (a JSON array): the images have no shell", in.line, in.cmd, in.args)
	}
	return argv
}

// makeBuild returns the value of the Makefile's BUILD variable as make passes it to the shell:
// as written, make's $$ unescaped to $.
func makeBuild(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "BUILD"); ok {
			if _, value, ok := strings.Cut(rest, ":="); ok {
				return strings.ReplaceAll(strings.TrimSpace(value), "$$", "$")
			}
		}
	}
	t.Fatal("the Makefile has no BUILD := line")
	return ""
}

// shellWords splits s at blanks outside double quotes and drops the quotes: enough for the BUILD
// line.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote, inWord = !inQuote, true
		case (r == ' ' || r == '\t') && !inQuote:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inQuote {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func TestMakefileBuildLine(t *testing.T) {
	const release, commit = "v1.2.3", "0123456789abcdef0123456789abcdef01234567"
	got := append([]string{"CGO_ENABLED=0", "go"}, batonBuildArgs("bin/", release, commit)...)
	// The line as the shell runs it with the Makefile's VERSION and COMMIT exported (and as the
	// Dockerfile's RUN with its build arguments).
	env := map[string]string{"VERSION": release, "COMMIT": commit}
	var words []string
	for _, w := range shellWords(t, makeBuild(t)) {
		words = append(words, os.Expand(w, func(k string) string { return env[k] }))
	}
	if diff := cmp.Diff(words, got); diff != "" {
		t.Errorf("BuildAll builds the baton binaries otherwise than the Makefile's BUILD line; change batonBuildArgs with it (-Makefile +BuildAll):\n%s", diff)
	}
}

func TestDockerfileAgrees(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	final := stages[len(stages)-1]
	if base, _, _ := strings.Cut(final.from, "@"); base != distrolessNonroot {
		t.Errorf("the Dockerfile's final stage is FROM %s; ociimage.NonrootBase mirrors %s: make it mirror the new base, then change this test",
			base, distrolessNonroot)
	}
	names, err := BatonBinaries(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(names, "sidecar") || !slices.Contains(names, "operator") {
		t.Fatalf("BatonBinaries = %v, want at least operator and sidecar", names)
	}

	// What the Dockerfile says, starting from what the base provides.
	want := struct {
		User, WorkingDir string
		Entrypoint, Cmd  []string
		Binaries         []string // paths in the image
	}{User: ociimage.NonrootBase(nil).Config.User, WorkingDir: ociimage.NonrootHome}
	buildOut := batonBuildArgs("bin/", "", "")[4] // -o's value
	for _, in := range final.body {
		switch in.cmd {
		case "COPY":
			fields := strings.Fields(in.args)
			from, ok := strings.CutPrefix(fields[0], "--from=")
			if !ok || len(fields) != 3 {
				t.Errorf("Dockerfile:%d: COPY %s: the test knows only COPY --from=<build stage> <BUILD's output>/ <dir>/", in.line, in.args)
				continue
			}
			src, dest := fields[1], fields[2]
			builder := buildStage(t, stages, from)
			if wantSrc := path.Join(workdir(builder), buildOut) + "/"; src != wantSrc {
				t.Errorf("Dockerfile:%d: COPY from %s, but the BUILD line writes the binaries to %s", in.line, src, wantSrc)
			}
			if !strings.HasSuffix(dest, "/") || path.Clean(dest) != BinDir {
				t.Errorf("Dockerfile:%d: COPY to %s; BatonSpec puts the binaries in %s/: change one to match the other", in.line, dest, BinDir)
			}
			for _, n := range names {
				want.Binaries = append(want.Binaries, path.Join(path.Clean(dest), n))
			}
		case "USER":
			want.User = in.args
		case "WORKDIR":
			want.WorkingDir = in.args
		case "ENTRYPOINT":
			want.Entrypoint, want.Cmd = execForm(t, in), nil // ENTRYPOINT resets CMD
		case "CMD":
			want.Cmd = execForm(t, in)
		default:
			t.Errorf("Dockerfile:%d: the final stage has %s, which BatonSpec does not mirror: add it to BatonSpec and to this test", in.line, in.cmd)
		}
	}

	// What BatonSpec builds, read back from the image.
	binDir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(binDir, n), []byte("binary "+n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img, err := ociimage.Build(BatonSpec(binDir, names, []byte("bundle")))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	got := want
	got.User, got.WorkingDir, got.Entrypoint, got.Cmd = cf.Config.User, cf.Config.WorkingDir, cf.Config.Entrypoint, cf.Config.Cmd
	got.Binaries = nil
	for _, e := range extract(t, img) {
		if e.Type == 0 || e.Mode.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name, strings.TrimPrefix(BinDir, "/")+"/") {
			if e.Mode != 0o755 || e.UID != 0 || e.GID != 0 {
				t.Errorf("%s: mode %v owner %d:%d, want 0755 root:root as COPY makes it", e.Name, e.Mode, e.UID, e.GID)
			}
			got.Binaries = append(got.Binaries, "/"+e.Name)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the Dockerfile's final stage and BatonSpec's image differ (-Dockerfile +BatonSpec):\n%s", diff)
	}
}

// buildStage returns the stage named name.
func buildStage(t *testing.T, stages []stage, name string) stage {
	t.Helper()
	for _, s := range stages {
		if s.name == name {
			builder := s
			var runs []string
			for _, in := range s.body {
				if in.cmd == "RUN" {
					runs = append(runs, in.args)
				}
			}
			if !slices.Contains(runs, makeBuild(t)) {
				t.Errorf("the %s stage does not RUN the Makefile's BUILD line (make check says the same)", name)
			}
			return builder
		}
	}
	t.Fatalf("the Dockerfile has no stage %q", name)
	return stage{}
}

// workdir returns the last WORKDIR of a stage ("/" if none).
func workdir(s stage) string {
	dir := "/"
	for _, in := range s.body {
		if in.cmd == "WORKDIR" {
			dir = path.Join(dir, in.args)
		}
	}
	return dir
}
