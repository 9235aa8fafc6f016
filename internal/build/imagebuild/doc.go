// Package imagebuild builds baton's container images from this repository's source, without a
// Docker engine and without pulling anything, into one docker-archive tarball (package ociimage):
//
//	baton.local/baton:dev    the Dockerfile's final stage: operator, sidecar and baton CLI in
//	                         /usr/local/bin on a nonroot base, user 65532:65532, entrypoint sidecar
//	baton.local/pause:dev    the pod sandbox's pause process (hack/pause) as /pause
//	baton.local/demoapp:dev  the demo app and fenced store (hack/demoapp)
//
// BuildAll compiles the binaries with the go command (the baton binaries with the Makefile's BUILD
// line, its VERSION and COMMIT from WithVersion; the others with the same flags), assembles the images and writes <outDir>/images.tar,
// which ctr -n k8s.io images import, docker load and kind load image-archive accept, and beside it
// one CycloneDX SBOM per image, <outDir>/sbom/<name>.cdx.json (package sbom): the image by tag
// and digest, its Go binaries with their SHA-256, Go version and build settings, and every module
// they link with version and go.sum hash. make image
// runs it through hack/image. A test keeps BatonSpec in step with the Dockerfile and the build
// command in step with the Makefile.
//
// What it does not do: push (and so attach the SBOMs to a registry's image as OCI referrers),
// import into a runtime, or build for another platform than linux/amd64. The tags are fixed ("dev"): importing a new archive moves them to the new images,
// so pods must not pull them (imagePullPolicy Never or IfNotPresent).
package imagebuild
