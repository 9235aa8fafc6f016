package skew_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// buildTimeout bounds one build of a sidecar: the checkout's own packages compile anew (their
// sources differ from today's), every module they import comes from the module cache.
const buildTimeout = 10 * time.Minute

// repoRoot returns the top of the git work tree this package lives in.
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the git work tree of the skew test (it builds earlier releases from git): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// errCommitMissing says a pinned release commit is not in this clone.
var errCommitMissing = errors.New("commit not in this clone")

// errShallowClone says the clone has no history before its newest commits: nothing earlier can be
// built from it, and nothing the project installs can bring the history back when the clone's
// origin is out of reach (.ci/run tries `git fetch --unshallow` first).
var errShallowClone = errors.New("shallow clone")

// haveCommit reports whether commit is in the clone at root, with errCommitMissing (and what to do)
// when it is not: a shallow clone (CI's depth-1 checkouts) lacks every earlier commit.
func haveCommit(ctx context.Context, root, commit string) error {
	cmd := exec.CommandContext(ctx, "git", "cat-file", "-e", commit+"^{commit}")
	cmd.Dir = root
	if err := cmd.Run(); err != nil {
		if out, serr := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-shallow-repository").Output(); serr == nil &&
			strings.TrimSpace(string(out)) == "true" {
			return fmt.Errorf("%w, %w: the skew test builds the sidecar of release N-1 from commit %s, which this clone lacks. "+
				"Fetch the history (git fetch --unshallow, or git fetch origin %s) and run the test again: %w",
				errShallowClone, errCommitMissing, commit, commit, err)
		}
		return fmt.Errorf("%w: the skew test builds the sidecar of release N-1 from commit %s, which this full clone lacks "+
			"(was the history rewritten?); update the pinned commit in test/skew: %w", errCommitMissing, commit, err)
	}
	return nil
}

// sidecarAt returns the path of cmd/sidecar built from commit: the file in the cache when a
// build of that commit with this Go toolchain is there, else a fresh build from `git archive` of
// the commit into a temporary directory, with the same toolchain (GOTOOLCHAIN=local) and module
// cache as the test, which it then caches. The second run of a test costs a stat, the first about
// as much as a build of today's sidecar.
//
// What it does not guarantee: that the modules of the commit's go.sum are in the module cache;
// missing ones are downloaded through GOPROXY like any go build's, and without a network the
// build fails and says so.
func sidecarAt(ctx context.Context, root, commit string) (string, error) {
	if err := haveCommit(ctx, root, commit); err != nil {
		return "", err
	}
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("the sidecar builds of earlier releases are cached in the user cache directory: %w", err)
	}
	dir := filepath.Join(cacheDir, "baton", "skew")
	bin := filepath.Join(dir, fmt.Sprintf("sidecar-%s-%s-%s-%s", commit, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	src, err := os.MkdirTemp("", "baton-skew-src")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	archive := filepath.Join(src, "src.tar")
	if out, err := run(ctx, root, nil, "git", "archive", "--format=tar", "-o", archive, commit); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", commit, err, out)
	}
	tree := filepath.Join(src, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", err
	}
	if out, err := run(ctx, tree, nil, "tar", "-xf", archive); err != nil {
		return "", fmt.Errorf("unpacking the archive of %s: %w\n%s", commit, err, out)
	}
	// A name of our own, renamed into place: test binaries of two runs may build at once.
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	env := []string{"GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=-buildvcs=false -mod=readonly", "CGO_ENABLED=0"}
	if out, err := run(ctx, tree, env, "go", "build", "-trimpath", "-o", tmp, "./cmd/sidecar"); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("building cmd/sidecar of %s (go on PATH must be %s, the test's own): %w\n%s", commit, runtime.Version(), err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// sidecarHere builds today's cmd/sidecar (the work tree's, release N) into dir.
func sidecarHere(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "sidecar-here")
	if out, err := run(ctx, root, []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath", "-o", bin, "./cmd/sidecar"); err != nil {
		return "", fmt.Errorf("building today's cmd/sidecar: %w\n%s", err, out)
	}
	return bin, nil
}

// run runs name in dir with the test's environment plus env, and returns its combined output.
func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	return cmd.CombinedOutput()
}

// TestMissingCommitSaysSo: a commit a full clone lacks is an error that names the commit, which
// TestSkewHandOff reports as its failure; only a shallow clone (no history at all) makes it skip.
func TestMissingCommitSaysSo(t *testing.T) {
	ctx := context.Background()
	root, err := repoRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const missing = "0123456789abcdef0123456789abcdef01234567"
	_, err = sidecarAt(ctx, root, missing)
	if !errors.Is(err, errCommitMissing) || !strings.Contains(err.Error(), missing) {
		t.Errorf("sidecarAt(%s) = %v; want errCommitMissing naming the commit", missing, err)
	}
	shallow, serr := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
	if serr != nil {
		t.Fatal(serr)
	}
	full := strings.TrimSpace(string(shallow)) == "false"
	if full == errors.Is(err, errShallowClone) {
		t.Errorf("sidecarAt(%s) in a clone whose git says shallow=%s: %v; want errShallowClone (which makes TestSkewHandOff skip) in a shallow clone only", missing, strings.TrimSpace(string(shallow)), err)
	}
	if err := haveCommit(ctx, root, previousCommit); full && err != nil {
		t.Errorf("release N-1: %v", err)
	}
}
