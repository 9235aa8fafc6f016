// Package sbom writes a CycloneDX software bill of materials (SBOM) for a container image of Go
// binaries, from the build information the go command embeds in every binary it links (package
// debug/buildinfo; stripping with -ldflags=-s -w keeps it). For each binary it records the Go
// toolchain, the main module and package, the build settings the go command records (-trimpath,
// CGO_ENABLED, GOOS, GOARCH, ...; it leaves -ldflags out of -trimpath builds), the file's
// SHA-256, and every module the binary links with its version and its go.sum hash; the Go
// standard library is the component "std" at the Go version, as vulnerability scanners expect.
//
// The BOM is reproducible: no timestamp, components and dependencies in a fixed order, and a
// serial number derived from the image's digest, so the same image always gets the same bytes.
//
// What it does not do: list the files of an image that are not Go binaries (baton's images add
// /etc/passwd, /etc/group, /etc/nsswitch.conf and the build host's CA bundle, none from a package
// manager), licences (build information has none), or the packages linked within a module. A
// module's hash is its go.sum "h1:" hash (SHA-256 over the module's file list, as the Go checksum
// database records it), written as hex with the original in the property baton:go:sum; it is not
// a hash of a file anyone downloads. The main module's version is what the go command stamped:
// "(devel)" when the build had no version control information (-buildvcs=false, or a tree
// without .git, as docker build's context is).
package sbom
