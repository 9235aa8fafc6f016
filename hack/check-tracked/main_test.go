package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo makes a git repository in a temporary directory holding files (path to content, with
// mode), all added to the index, and returns its path.
func gitRepo(t *testing.T, files map[string]file) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	git("init", "-q")
	for name, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.content, 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", name)
		if f.exec {
			// The index's mode, whatever the file system keeps.
			git("update-index", "--chmod=+x", name)
		}
	}
	return dir
}

type file struct {
	content []byte
	exec    bool
}

// peHead is the start of a PE file: "MZ", the PE header's offset at 0x3c, and the signature there.
func peHead() []byte {
	b := make([]byte, 0x100)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[0x3c:], 0x80)
	copy(b[0x80:], "PE\x00\x00")
	return b
}

func TestCheckTracked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]file
		want  []string // substrings of the problems, in index (path) order; none: exit 0
	}{
		{"clean", map[string]file{
			"main.go": {content: []byte("package main\n")},
			".ci/run": {content: []byte("#!/usr/bin/env bash\nmake test\n"), exec: true},
			"empty":   {},
			"MZ.txt":  {content: []byte("MZ is not a PE file without its header\n")},
		}, nil},
		{"ELF without the executable bit", map[string]file{
			"chaoswriter": {content: append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 100)...)},
		}, []string{"chaoswriter: ELF binary"}},
		{"Mach-O", map[string]file{
			"tool": {content: []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, exec: true},
		}, []string{"tool: Mach-O binary"}},
		{"PE", map[string]file{"tool.exe": {content: peHead()}}, []string{"tool.exe: PE binary"}},
		{"too large", map[string]file{
			"data.json": {content: bytes.Repeat([]byte("x"), DefaultMaxSize+1)},
			"edge.json": {content: bytes.Repeat([]byte("x"), DefaultMaxSize)},
		}, []string{"data.json: 1048577 bytes, over the limit of 1048576"}},
		{"executable script off the allow-list", map[string]file{
			"hack/run.sh": {content: []byte("#!/bin/sh\n"), exec: true},
		}, []string{"hack/run.sh: executable (mode 100755) and not on the allow-list"}},
		{"allow-listed executable without a shebang", map[string]file{
			".ci/run": {content: []byte("make test\n"), exec: true},
		}, []string{".ci/run: on the allow-list of executables but no script"}},
		{"allow-listed binary", map[string]file{
			".ci/run": {content: []byte("\x7fELF\x02\x01\x01\x00"), exec: true},
		}, []string{".ci/run: ELF binary"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := gitRepo(t, tc.files)
			var out bytes.Buffer
			code := run(t.Context(), &out, dir, DefaultMaxSize)
			var problems []string
			for line := range strings.Lines(out.String()) {
				if strings.HasPrefix(line, "check-tracked: ") && strings.Contains(line, ": ") &&
					!strings.Contains(line, "tracked files") {
					problems = append(problems, strings.TrimSpace(strings.TrimPrefix(line, "check-tracked: ")))
				}
			}
			if len(problems) != len(tc.want) {
				t.Fatalf("problems %q, want %d matching %q; output:\n%s", problems, len(tc.want), tc.want, &out)
			}
			for i, w := range tc.want {
				if !strings.Contains(problems[i], w) {
					t.Errorf("problem %d is %q, want it to contain %q", i, problems[i], w)
				}
			}
			if want := min(len(tc.want), 1); code != want {
				t.Errorf("exit %d, want %d; output:\n%s", code, want, &out)
			}
		})
	}
}

func TestCheckTrackedOutsideGit(t *testing.T) {
	var out bytes.Buffer
	if code := run(t.Context(), &out, t.TempDir(), DefaultMaxSize); code != 0 {
		t.Fatalf("exit %d outside a git work tree, want 0; output:\n%s", code, &out)
	}
	if !strings.Contains(out.String(), "skipped") {
		t.Errorf("output does not say it skipped:\n%s", &out)
	}
}
