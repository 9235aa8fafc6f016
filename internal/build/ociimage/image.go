package ociimage

import (
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// The platform of every image Build makes.
const (
	OS           = "linux"
	Architecture = "amd64"
)

// epoch, the Unix epoch, is the creation time of every image and the modification time of every
// file in it.
var epoch = time.Unix(0, 0).UTC()

// Spec is everything an image is made of.
type Spec struct {
	// Files of the image's one layer, in any order. Parent directories that are not listed are
	// added as root-owned 0755 directories.
	Files []File
	// Config is how a runtime starts the image.
	Config Config
}

// File is one regular file or directory of an image.
type File struct {
	// Path is the absolute, clean path in the image, e.g. "/usr/local/bin/sidecar".
	Path string
	// Mode holds the permission bits, fs.ModeDir for a directory, and optionally fs.ModeSetuid,
	// fs.ModeSetgid and fs.ModeSticky. Permission bits 0 mean 0644 for a file and 0755 for a
	// directory.
	Mode fs.FileMode
	// UID and GID own the file.
	UID, GID int
	// Source is a host file whose content Build copies (read once, when Build runs). Empty: the
	// content is Data. A directory has neither.
	Source string
	// Data is the content of a file without a Source.
	Data []byte
}

// IsDir reports whether f is a directory.
func (f File) IsDir() bool { return f.Mode.IsDir() }

// Config is the part of an image's config that says how to run it. Empty fields are left out.
type Config struct {
	// Entrypoint and Cmd are exec-form: no shell is involved.
	Entrypoint []string
	Cmd        []string
	// User is "uid", "uid:gid" or a name from the image's /etc/passwd; empty means root.
	User string
	// Env holds "NAME=value" entries.
	Env []string
	// WorkingDir is an absolute path; empty means /.
	WorkingDir string
	// Labels are the image's labels.
	Labels map[string]string
	// ExposedPorts are "port/protocol" entries, e.g. "8080/tcp", protocol tcp, udp or sctp.
	ExposedPorts []string
}

// Build returns the linux/amd64 image of spec: one layer holding spec.Files, spec.Config, and
// the Unix epoch as every timestamp. It checks the whole spec first and returns one error wrapping
// ErrInvalidSpec that lists every problem; then it reads the Source files. The image is held in
// memory (its compressed layer too), so it suits images of tens of megabytes.
func Build(spec Spec) (v1.Image, error) {
	entries, err := plan(spec)
	if err != nil {
		return nil, err
	}
	layer, err := newLayer(entries)
	if err != nil {
		return nil, err
	}
	cfg := &v1.ConfigFile{
		Architecture: Architecture,
		OS:           OS,
		Created:      v1.Time{Time: epoch},
		Config:       spec.Config.v1(),
		RootFS:       v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, fmt.Errorf("ociimage: set config: %w", err)
	}
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "baton ociimage", Comment: fmt.Sprintf("%d entries", len(entries))},
	})
	if err != nil {
		return nil, fmt.Errorf("ociimage: add layer: %w", err)
	}
	return img, nil
}

func (c Config) v1() v1.Config {
	out := v1.Config{
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
		User:       c.User,
		Env:        slices.Clone(c.Env),
		WorkingDir: c.WorkingDir,
		Labels:     maps.Clone(c.Labels),
	}
	if len(c.ExposedPorts) > 0 {
		out.ExposedPorts = make(map[string]struct{}, len(c.ExposedPorts))
		for _, p := range c.ExposedPorts {
			out.ExposedPorts[p] = struct{}{}
		}
	}
	return out
}

// problems collects what is wrong with a spec.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidSpec, strings.Join(p, "; "))
}

// plan checks spec and returns the layer's entries sorted by path, implied parent directories
// included and default modes filled in.
func plan(spec Spec) ([]File, error) {
	var p problems
	byPath := make(map[string]File, len(spec.Files))
	for _, f := range spec.Files {
		checkFile(&p, f)
		if _, dup := byPath[f.Path]; dup {
			p.add("%s is listed twice", f.Path)
			continue
		}
		if f.Mode.Perm() == 0 {
			f.Mode |= 0o644
			if f.IsDir() {
				f.Mode |= 0o111
			}
		}
		byPath[f.Path] = f
	}
	for _, f := range spec.Files {
		for dir := path.Dir(f.Path); dir != "/" && dir != "."; dir = path.Dir(dir) {
			parent, ok := byPath[dir]
			if !ok {
				byPath[dir] = File{Path: dir, Mode: fs.ModeDir | 0o755}
			} else if !parent.IsDir() {
				p.add("%s is a file but %s is below it", dir, f.Path)
			}
		}
	}
	checkConfig(&p, spec.Config)
	if err := p.err(); err != nil {
		return nil, err
	}
	return slices.SortedFunc(maps.Values(byPath), func(a, b File) int { return strings.Compare(a.Path, b.Path) }), nil
}

const allowedMode = fs.ModeDir | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

func checkFile(p *problems, f File) {
	if !strings.HasPrefix(f.Path, "/") || path.Clean(f.Path) != f.Path || f.Path == "/" {
		p.add("path %q: want an absolute, clean path below /", f.Path)
	}
	if extra := f.Mode &^ allowedMode; extra != 0 {
		p.add("%s: mode %v: only regular files and directories, with permission, setuid, setgid and sticky bits", f.Path, f.Mode)
	}
	if f.UID < 0 || f.GID < 0 {
		p.add("%s: owner %d:%d is negative", f.Path, f.UID, f.GID)
	}
	switch {
	case f.IsDir() && (f.Source != "" || f.Data != nil):
		p.add("%s: a directory has no Source or Data", f.Path)
	case f.Source != "" && f.Data != nil:
		p.add("%s: set Source or Data, not both", f.Path)
	}
}

func checkConfig(p *problems, c Config) {
	if c.WorkingDir != "" && !path.IsAbs(c.WorkingDir) {
		p.add("working directory %q is not absolute", c.WorkingDir)
	}
	for _, e := range c.Env {
		if name, _, ok := strings.Cut(e, "="); !ok || name == "" {
			p.add("environment entry %q: want NAME=value", e)
		}
	}
	for _, port := range c.ExposedPorts {
		num, proto, _ := strings.Cut(port, "/")
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 || n > 65535 || (proto != "tcp" && proto != "udp" && proto != "sctp") {
			p.add("exposed port %q: want port/protocol, e.g. 8080/tcp", port)
		}
	}
}
