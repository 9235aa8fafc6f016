package sbom

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strings"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SpecVersion is the CycloneDX version of the BOMs Write writes.
const SpecVersion = cdx.SpecVersion1_6

// ErrNotGoBinary is wrapped by New when a binary carries no Go build information.
var ErrNotGoBinary = errors.New("sbom: not a Go binary with build information")

// Property names, in baton's own namespace.
const (
	PropPath        = "baton:image:path"   // a binary's path in the image
	PropImageID     = "baton:image:id"     // the image's config digest, its ID in docker and containerd
	PropImageDigest = "baton:image:digest" // the image's manifest digest
	PropGoVersion   = "baton:go:version"   // the toolchain that built a binary, e.g. go1.26.8
	PropMainModule  = "baton:go:module"    // a binary's main module path
	PropMainPackage = "baton:go:package"   // a binary's main package path
	PropGoSum       = "baton:go:sum"       // a module's go.sum hash, "h1:..."
	PropReplaces    = "baton:go:replaces"  // for a replacement module: the path@version it replaces
	PropBuildPrefix = "baton:go:build:"    // followed by a build setting's key, e.g. baton:go:build:-trimpath
)

// Binary is one Go binary in an image.
type Binary struct {
	// Path is its absolute path in the image, e.g. "/usr/local/bin/sidecar".
	Path string
	// File is where it is on disk, read by New.
	File string
}

// Image is what New describes.
type Image struct {
	// Ref is the image's name, "registry/repository:tag", e.g. "baton.local/baton:dev".
	Ref string
	// Digest is the manifest digest and ID the config digest, both "sha256:<hex>".
	Digest, ID string
	// Binaries are the image's Go binaries.
	Binaries []Binary
}

// New returns the BOM of img: the image as the metadata component, each binary as an
// application, std and every linked module as libraries (shared by binaries, listed once), and
// dependencies image -> binaries -> std and modules. It fails, wrapping ErrNotGoBinary, on a
// binary without build information, and on one it cannot read or hash.
func New(img Image) (*cdx.BOM, error) {
	repo, tag := splitRef(img.Ref)
	imageRef := "image:" + img.Ref
	meta := cdx.Component{
		BOMRef:     imageRef,
		Type:       cdx.ComponentTypeContainer,
		Name:       repo,
		Version:    tag,
		PackageURL: ociPURL(repo, tag, img.Digest),
		Properties: props(PropImageDigest, img.Digest, PropImageID, img.ID),
	}
	if h, ok := sha256Hex(img.Digest); ok {
		meta.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: h}}
	}

	libs := map[string]cdx.Component{} // by bom-ref
	var apps []cdx.Component
	var deps []cdx.Dependency
	var imageDeps []string
	for _, b := range img.Binaries {
		app, uses, err := binary(b, libs)
		if err != nil {
			return nil, err
		}
		apps = append(apps, app)
		imageDeps = append(imageDeps, app.BOMRef)
		deps = append(deps, cdx.Dependency{Ref: app.BOMRef, Dependencies: &uses})
	}
	comps := apps
	for _, ref := range slices.Sorted(maps.Keys(libs)) {
		comps = append(comps, libs[ref])
		deps = append(deps, cdx.Dependency{Ref: ref}) // a module's own dependencies are not in build information
	}
	deps = append([]cdx.Dependency{{Ref: imageRef, Dependencies: &imageDeps}}, deps...)

	bom := cdx.NewBOM()
	bom.SerialNumber = serial(img.Digest)
	bom.Metadata = &cdx.Metadata{Component: &meta}
	bom.Components = &comps
	bom.Dependencies = &deps
	return bom, nil
}

// Write encodes bom as indented CycloneDX JSON of SpecVersion.
func Write(w io.Writer, bom *cdx.BOM) error {
	enc := cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	enc.SetEscapeHTML(false)
	if err := enc.EncodeVersion(bom, SpecVersion); err != nil {
		return fmt.Errorf("sbom: encode: %w", err)
	}
	return nil
}

// WriteFile writes bom to path (as Write), replacing it.
func WriteFile(path string, bom *cdx.BOM) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	if err := Write(f, bom); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sbom: %w", err)
	}
	return nil
}

// binary returns the component of b and the bom-refs it depends on, adding std and its modules
// to libs.
func binary(b Binary, libs map[string]cdx.Component) (cdx.Component, []string, error) {
	bi, err := buildinfo.ReadFile(b.File)
	if err != nil {
		return cdx.Component{}, nil, fmt.Errorf("%w: %s (%s): %w", ErrNotGoBinary, b.Path, b.File, err)
	}
	sum, err := fileSHA256(b.File)
	if err != nil {
		return cdx.Component{}, nil, err
	}
	mainPkg := bi.Path
	sub := strings.TrimPrefix(strings.TrimPrefix(mainPkg, bi.Main.Path), "/")
	purl := goPURL(bi.Main.Path, bi.Main.Version)
	if sub != "" && sub != mainPkg {
		purl += "#" + sub
	}
	kv := []string{PropPath, b.Path, PropGoVersion, bi.GoVersion, PropMainModule, bi.Main.Path, PropMainPackage, mainPkg}
	for _, s := range bi.Settings {
		kv = append(kv, PropBuildPrefix+s.Key, s.Value)
	}
	p := props(kv...)
	app := cdx.Component{
		BOMRef:     "binary:" + b.Path,
		Type:       cdx.ComponentTypeApplication,
		Name:       path.Base(b.Path),
		Version:    bi.Main.Version,
		PackageURL: purl,
		Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}},
		Properties: p,
	}

	std := cdx.Component{
		Type:       cdx.ComponentTypeLibrary,
		Name:       "std",
		Version:    bi.GoVersion,
		PackageURL: goPURL("std", bi.GoVersion),
	}
	std.BOMRef = std.PackageURL
	libs[std.BOMRef] = std
	uses := []string{std.BOMRef}
	for _, m := range bi.Deps {
		c := module(m)
		libs[c.BOMRef] = c
		uses = append(uses, c.BOMRef)
	}
	slices.Sort(uses)
	return app, slices.Compact(uses), nil
}

// module returns the component of a dependency: the replacement when there is one, since that is
// the code linked.
func module(m *debug.Module) cdx.Component {
	used := m
	var replaces string
	if m.Replace != nil {
		used, replaces = m.Replace, m.Path+"@"+m.Version
	}
	c := cdx.Component{
		Type:       cdx.ComponentTypeLibrary,
		Name:       used.Path,
		Version:    used.Version,
		PackageURL: goPURL(used.Path, used.Version),
	}
	c.BOMRef = c.PackageURL
	var p []cdx.Property
	if used.Sum != "" {
		p = append(p, cdx.Property{Name: PropGoSum, Value: used.Sum})
		if h, ok := h1Hex(used.Sum); ok {
			c.Hashes = &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: h}}
		}
	}
	if replaces != "" {
		p = append(p, cdx.Property{Name: PropReplaces, Value: replaces})
	}
	if len(p) > 0 {
		c.Properties = &p
	}
	return c
}

// goPURL returns the package URL of a Go module; a version of "(devel)" or "" is left out.
func goPURL(modPath, version string) string {
	s := "pkg:golang/" + escapePath(modPath)
	if version != "" && version != "(devel)" {
		s += "@" + url.PathEscape(version)
	}
	return s
}

// ociPURL returns the package URL of an image by digest, with its repository and tag.
func ociPURL(repo, tag, digest string) string {
	s := "pkg:oci/" + url.PathEscape(path.Base(repo))
	if digest != "" {
		s += "@" + url.PathEscape(digest)
	}
	q := url.Values{}
	q.Set("repository_url", repo)
	if tag != "" {
		q.Set("tag", tag)
	}
	return s + "?" + q.Encode()
}

// escapePath percent-encodes each segment of a slash-separated path.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// splitRef splits "registry/repository:tag" at the tag's colon (a registry's port is not one).
func splitRef(ref string) (repo, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// h1Hex returns the SHA-256 of a go.sum "h1:<base64>" hash as hex.
func h1Hex(sum string) (string, bool) {
	b64, ok := strings.CutPrefix(sum, "h1:")
	if !ok {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(b) != sha256.Size {
		return "", false
	}
	return hex.EncodeToString(b), true
}

// sha256Hex returns the hex of a "sha256:<hex>" digest.
func sha256Hex(digest string) (string, bool) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 2*sha256.Size {
		return "", false
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", false
	}
	return h, true
}

// serial returns a urn:uuid made from the image digest (a version 8, name-based UUID), or "" when
// there is no digest: the same image always gets the same serial number.
func serial(digest string) string {
	if digest == "" {
		return ""
	}
	h := sha256.Sum256([]byte("baton sbom " + digest))
	u := h[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	x := hex.EncodeToString(u)
	return fmt.Sprintf("urn:uuid:%s-%s-%s-%s-%s", x[0:8], x[8:12], x[12:16], x[16:20], x[20:32])
}

// fileSHA256 returns the hex SHA-256 of a file's content.
func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", fmt.Errorf("sbom: %w", err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("sbom: hash %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// props returns name/value pairs as properties, leaving out empty values; nil when none is left.
func props(kv ...string) *[]cdx.Property {
	var p []cdx.Property
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			p = append(p, cdx.Property{Name: kv[i], Value: kv[i+1]})
		}
	}
	if len(p) == 0 {
		return nil
	}
	return &p
}
