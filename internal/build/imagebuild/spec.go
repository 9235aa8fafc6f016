package imagebuild

import (
	"path"
	"path/filepath"

	"github.com/baton-dev/baton/internal/build/ociimage"
)

// The images' tags. They name a registry that does not exist: the images are imported, never
// pulled.
const (
	BatonTag   = "baton.local/baton:dev"
	PauseTag   = "baton.local/pause:dev"
	DemoAppTag = "baton.local/demoapp:dev"
)

// Where the binaries go in the images.
const (
	// BinDir holds the baton binaries (the Dockerfile's COPY destination) and demoapp.
	BinDir = "/usr/local/bin"
	// PausePath is the pause image's only file and entrypoint.
	PausePath = "/pause"
	// DemoAppPath is the demo app image's entrypoint.
	DemoAppPath = BinDir + "/demoapp"
)

// Users the images run as.
const (
	// BatonUser is the Dockerfile's USER.
	BatonUser = "65532:65532"
	// PauseUser is the user of the pause process, the nobody-like 65535 that Kubernetes' own
	// pause image uses.
	PauseUser = "65535:65535"
)

// DemoAppPort is the port the demo app and the fenced store listen on.
const DemoAppPort = "8080/tcp"

// BatonSpec returns the spec of the baton image, the Dockerfile's final stage: the nonroot base
// with caBundle, each binary named in names copied from binDir to BinDir, user BatonUser and
// entrypoint BinDir/sidecar.
func BatonSpec(binDir string, names []string, caBundle []byte) ociimage.Spec {
	spec := ociimage.NonrootBase(caBundle)
	for _, n := range names {
		spec.Files = append(spec.Files, ociimage.File{Path: path.Join(BinDir, n), Mode: 0o755, Source: filepath.Join(binDir, n)})
	}
	spec.Config.User = BatonUser
	spec.Config.Entrypoint = []string{path.Join(BinDir, "sidecar")}
	return spec
}

// PauseSpec returns the spec of the pause image: binary at PausePath, run as PauseUser.
func PauseSpec(binary string) ociimage.Spec {
	return ociimage.Spec{
		Files:  []ociimage.File{{Path: PausePath, Mode: 0o755, Source: binary}},
		Config: ociimage.Config{Entrypoint: []string{PausePath}, User: PauseUser},
	}
}

// DemoAppSpec returns the spec of the demo app image: the nonroot base with caBundle, binary at
// DemoAppPath as entrypoint, user BatonUser, port DemoAppPort.
func DemoAppSpec(binary string, caBundle []byte) ociimage.Spec {
	spec := ociimage.NonrootBase(caBundle)
	spec.Files = append(spec.Files, ociimage.File{Path: DemoAppPath, Mode: 0o755, Source: binary})
	spec.Config.User = BatonUser
	spec.Config.Entrypoint = []string{DemoAppPath}
	spec.Config.ExposedPorts = []string{DemoAppPort}
	return spec
}
