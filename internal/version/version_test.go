package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/baton-dev/baton", Version: "v0.0.0-20261127203000-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}}
	noVCS := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/baton-dev/baton", Version: "(devel)"}}
	for _, tc := range []struct {
		name            string
		bi              *debug.BuildInfo
		release, commit string
		want            string
	}{
		{"go build in a checkout", vcs, "", "", "v0.0.0-20261127203000-0123456789ab+dirty commit 0123456789abcdef, modified (go1.26.8)"},
		{"no .git", noVCS, "", "", "devel commit unknown (go1.26.8)"},
		{"no .git, -X set", noVCS, "v1.2.3", "fedcba", "v1.2.3 commit fedcba (go1.26.8)"},
		{"-X wins", vcs, "v1.2.3", "fedcba", "v1.2.3 commit fedcba (go1.26.8)"},
		{"no build info", nil, "", "", "devel commit unknown (go unknown)"},
	} {
		if got := fromBuildInfo(tc.bi, tc.release, tc.commit).String(); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAsked(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--namespace=x", "--version"}, true},
		{[]string{"--", "--version"}, false},
		{[]string{"-v"}, false},
		{nil, false},
	} {
		if got := Asked(tc.args); got != tc.want {
			t.Errorf("Asked(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
