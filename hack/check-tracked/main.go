// Command check-tracked keeps built binaries and bulky files out of the repository, for make check:
//
//	go run ./hack/check-tracked [-max-size bytes]
//
// It reads every file of git's index (what is committed or staged, not the work tree) and fails
// when one is
//
//   - larger than -max-size (default 1 MiB), whatever it is;
//   - a binary executable: it starts with the magic number of an ELF, Mach-O (thin or universal)
//     or PE file, whatever its mode and wherever it is;
//   - executable (git mode 100755) without being on the allow-list below.
//
// The allow-list names scripts that must be executable to run (the CI entry point). A file on it
// must also start with a shebang line ("#!"): it lets a script keep its executable bit, never a
// binary. Adding to it is a reviewed change of this file.
//
// Outside a git work tree (an unpacked tarball) there is nothing tracked: it says so and passes.
//
// What it does not do: look at the work tree's untracked files, at history (a binary committed and
// later removed still weighs in the packed repository), or at file contents beyond the first
// bytes and the size; a binary in a format it does not know (a WebAssembly module, a jar) passes
// unless it is executable or too large.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// DefaultMaxSize is the largest tracked file allowed: 1 MiB.
const DefaultMaxSize = 1 << 20

// executableAllowed are the tracked paths allowed git mode 100755: scripts run by path.
var executableAllowed = map[string]bool{
	".ci/run": true, // the CI entry point, run as .ci/run
}

func main() {
	maxSize := flag.Int64("max-size", DefaultMaxSize, "largest tracked file allowed, in bytes")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "check-tracked: no arguments")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Stdout, ".", *maxSize))
}

// run checks the index of the git work tree at dir, prints each problem on out, and returns the
// exit status: 0 when nothing is wrong (or dir is no git work tree), 1 otherwise.
func run(ctx context.Context, out io.Writer, dir string, maxSize int64) int {
	entries, err := indexEntries(ctx, dir)
	if errors.Is(err, errNotGit) {
		fmt.Fprintf(out, "check-tracked: skipped: %s is not a git work tree, so nothing is tracked\n", dir)
		return 0
	}
	if err != nil {
		fmt.Fprintf(out, "check-tracked: %v\n", err)
		return 1
	}
	problems, err := check(ctx, dir, entries, maxSize)
	if err != nil {
		fmt.Fprintf(out, "check-tracked: %v\n", err)
		return 1
	}
	bad := map[string]bool{}
	for _, p := range problems {
		fmt.Fprintf(out, "check-tracked: %s: %s\n", p.path, p.what)
		bad[p.path] = true
	}
	if len(problems) > 0 {
		fmt.Fprintf(out, "check-tracked: %d of %d tracked files must not be tracked as they are: build binaries "+
			"(go build, make build) instead of committing them, keep large data out of git, and drop the "+
			"executable bit (git update-index --chmod=-x FILE) unless the file is a script on the allow-list "+
			"in hack/check-tracked/main.go\n", len(bad), len(entries))
		return 1
	}
	fmt.Fprintf(out, "check-tracked: %d tracked files, none over %d bytes, no binary, no executable outside the allow-list\n",
		len(entries), maxSize)
	return 0
}

// entry is one regular file of git's index.
type entry struct {
	mode string // "100644" or "100755"
	blob string // object name
	path string
}

var errNotGit = errors.New("not a git work tree")

// indexEntries lists the regular files of the index of the work tree at dir. Symbolic links and
// submodules are left out: they hold no file content of their own.
func indexEntries(ctx context.Context, dir string) ([]entry, error) {
	probe := exec.CommandContext(ctx, "git", "rev-parse", "--is-inside-work-tree")
	probe.Dir = dir
	if out, err := probe.Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		var exitErr *exec.ExitError
		if err == nil || errors.As(err, &exitErr) {
			return nil, errNotGit
		}
		return nil, fmt.Errorf("git rev-parse: %w", err)
	}
	cmd := exec.CommandContext(ctx, "git", "ls-files", "--stage", "-z")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var entries []entry
	for rec := range bytes.SplitSeq(bytes.TrimSuffix(out, []byte{0}), []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		// "<mode> <object> <stage>\t<path>"
		meta, path, ok := bytes.Cut(rec, []byte{'\t'})
		fields := strings.Fields(string(meta))
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("git ls-files: cannot parse %q", rec)
		}
		if fields[0] != "100644" && fields[0] != "100755" {
			continue // 120000 symbolic link, 160000 submodule
		}
		entries = append(entries, entry{mode: fields[0], blob: fields[1], path: string(path)})
	}
	return entries, nil
}

// problem is one thing wrong with one tracked file.
type problem struct{ path, what string }

// check reads each entry's blob from the object store with one git cat-file process and returns
// the problems found, in index order.
func check(ctx context.Context, dir string, entries []entry, maxSize int64) ([]problem, error) {
	cmd := exec.CommandContext(ctx, "git", "cat-file", "--batch")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("git cat-file: %w", err)
	}
	go func() {
		w := bufio.NewWriter(stdin)
		for _, e := range entries {
			fmt.Fprintln(w, e.blob)
		}
		_ = w.Flush()
		_ = stdin.Close()
	}()
	r := bufio.NewReader(stdout)
	var problems []problem
	for _, e := range entries {
		size, head, err := readBlob(r, e.blob)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("git cat-file %s (%s): %w: %s", e.blob, e.path, err, strings.TrimSpace(stderr.String()))
		}
		problems = append(problems, judge(e, size, head, maxSize)...)
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("git cat-file: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return problems, nil
}

// headLen is how much of a file judge looks at: enough for a PE header's offset and signature.
const headLen = 512

// readBlob reads one "<object> blob <size>\n<content>\n" answer of git cat-file --batch and returns
// the size and the first headLen bytes of the content.
func readBlob(r *bufio.Reader, blob string) (size int64, head []byte, err error) {
	header, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, err
	}
	fields := strings.Fields(header)
	if len(fields) != 3 || fields[0] != blob || fields[1] != "blob" {
		return 0, nil, fmt.Errorf("unexpected answer %q", strings.TrimSpace(header))
	}
	if size, err = strconv.ParseInt(fields[2], 10, 64); err != nil {
		return 0, nil, fmt.Errorf("unexpected answer %q: %w", strings.TrimSpace(header), err)
	}
	head = make([]byte, min(size, headLen))
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, nil, err
	}
	if _, err := r.Discard(int(size-int64(len(head))) + 1); err != nil { // the rest and the newline
		return 0, nil, err
	}
	return size, head, nil
}

// judge returns what is wrong with entry e of the given size whose content starts with head.
func judge(e entry, size int64, head []byte, maxSize int64) []problem {
	var problems []problem
	add := func(format string, args ...any) {
		problems = append(problems, problem{e.path, fmt.Sprintf(format, args...)})
	}
	if size > maxSize {
		add("%d bytes, over the limit of %d", size, maxSize)
	}
	if kind := binaryKind(head); kind != "" {
		add("%s binary: binaries are built, never tracked", kind)
	} else if e.mode == "100755" {
		switch {
		case !executableAllowed[e.path]:
			add("executable (mode 100755) and not on the allow-list")
		case !bytes.HasPrefix(head, []byte("#!")):
			add("on the allow-list of executables but no script: it has no #! line")
		}
	}
	return problems
}

// binaryKind names the executable format whose magic number head starts with, or returns "".
func binaryKind(head []byte) string {
	if len(head) < 4 {
		return ""
	}
	switch m := binary.BigEndian.Uint32(head); {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF"
	case m == 0xfeedface || m == 0xfeedfacf || m == 0xcefaedfe || m == 0xcffaedfe:
		return "Mach-O"
	case m == 0xcafebabe:
		return "Mach-O universal (or Java class)"
	case isPE(head):
		return "PE"
	}
	return ""
}

// isPE reports whether head is the start of a PE file: "MZ", and at the offset stored at 0x3c the
// signature "PE\0\0" (when that offset lies within head, as it does for every linker's output).
func isPE(head []byte) bool {
	if len(head) < 0x40 || !bytes.HasPrefix(head, []byte("MZ")) {
		return false
	}
	off := int(binary.LittleEndian.Uint32(head[0x3c:]))
	return off+4 <= len(head) && bytes.Equal(head[off:off+4], []byte("PE\x00\x00"))
}
