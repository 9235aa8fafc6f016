// Package ociimage assembles container images from files, without a Docker engine and without
// pulling anything: a single-platform linux/amd64 image of one layer, built from a list of files
// (path, mode, owner, content) and a config, written as a docker-archive tarball that docker
// load, kind load image-archive, crane push and containerd's ctr images import accept
// (WriteArchive), or as an OCI image layout tarball that carries a docker manifest.json too
// (WriteOCIArchive, what make release ships), which the same tools accept.
//
// Build is reproducible: every entry has the same fixed timestamp (the Unix epoch), entries are
// sorted by path, parent directories are implied in one way, and the config carries no host
// details, so the same files and config give the same digests on every run and every machine.
// NonrootBase provides the few files of a distroless "static nonroot" base that static Go
// binaries need (a nonroot user 65532, /tmp, a CA bundle).
//
// What it does not do: pull or extend base images from a registry, build more than one layer or
// more than one platform, or write symlinks, hard links or device files. The manifest digest
// depends on the gzip output of the Go release that compressed the layer; the config digest
// (the image ID that docker and containerd show) depends only on the uncompressed content.
package ociimage
