// Package version says which release and commit a baton binary was built from, for the
// --version flag of every binary and `baton version`.
//
// A plain `go build` in a git checkout needs nothing more: the go command records the commit
// (vcs.revision, vcs.modified) and, from Go 1.24, the module version derived from the git tags
// (v1.2.3 on a tagged commit, a pseudo-version such as v0.0.0-20261127203000-abcdef123456
// otherwise, +dirty with uncommitted changes). A build without the repository's .git (docker
// build, whose context leaves .git out) records neither; such a build may set both with
//
//	-ldflags "-X github.com/baton-dev/baton/internal/version.release=v1.2.3
//	          -X github.com/baton-dev/baton/internal/version.commit=<sha>"
//
// and otherwise reports version "devel" and commit "unknown". Nothing here is checked: a
// binary reports what its build said.
package version

import (
	"fmt"
	"runtime/debug"
)

// Set by the linker (-X) when the build has no VCS information; read only by Get. They are the
// only package-level variables: the linker can set nothing else.
var (
	release string
	commit  string
)

// Info is what a binary knows about its build.
type Info struct {
	// Version is the release (v1.2.3), a Go pseudo-version, or "devel".
	Version string
	// Commit is the full git commit, or "unknown".
	Commit string
	// Modified is true when the working tree had uncommitted changes at build time.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get reads the running binary's build information. -X values win over what the go command
// recorded, so that a release build states exactly what it was told.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, release, commit)
}

// fromBuildInfo is Get for a given build information (nil when there is none) and -X values.
func fromBuildInfo(bi *debug.BuildInfo, release, commit string) Info {
	info := Info{Version: "devel", Commit: "unknown"}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if release != "" {
		info.Version = release
	}
	if commit != "" {
		info.Commit, info.Modified = commit, false
	}
	return info
}

// String is the line every binary prints for --version, e.g.
// "baton-sidecar v1.2.3 commit 0123abcd... (go1.26.8)", with ", modified" after the commit when
// the tree had uncommitted changes.
func (i Info) String() string {
	c := i.Commit
	if i.Modified {
		c += ", modified"
	}
	goVersion := i.GoVersion
	if goVersion == "" {
		goVersion = "go unknown"
	}
	return fmt.Sprintf("%s commit %s (%s)", i.Version, c, goVersion)
}

// Line is the --version output of the binary called name: name, then String.
func Line(name string) string {
	return name + " " + Get().String()
}

// Usage is the line the binaries' -h output adds for -version.
const Usage = "  -version\n    \tprint the version and the commit this binary was built from, and exit"

// Asked reports whether args (a binary's arguments, without its name) ask for the version:
// -version or --version before any "--". It lets a binary answer --version before it checks
// its other settings, so that the answer needs none of them.
func Asked(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-version", "--version":
			return true
		}
	}
	return false
}
