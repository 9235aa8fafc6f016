package ociimage

import "io/fs"

// What NonrootBase provides, as distroless "static nonroot" images do.
const (
	// NonrootUID is the user (and group) id of the nonroot user.
	NonrootUID = 65532
	// NonrootHome is the nonroot user's home and the base's working directory.
	NonrootHome = "/home/nonroot"
	// CABundlePath is where the CA bundle goes, the path Go's crypto/x509 reads on Debian.
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	// DefaultPath is the base's PATH.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// NonrootBase returns the spec of a minimal base for static binaries that run as the nonroot
// user: /etc/passwd and /etc/group (root 0, nobody 65534, nonroot 65532), /etc/nsswitch.conf,
// /root, NonrootHome owned by nonroot, /tmp (1777), and caBundle (PEM) at CABundlePath unless it
// is empty; its config runs as user NonrootUID in NonrootHome with PATH set, and SSL_CERT_FILE
// when there is a bundle. Add files and set the config's Entrypoint on the copy it returns.
//
// It is not distroless: no time zone data, no /etc/os-release, no package database, no licence
// files.
func NonrootBase(caBundle []byte) Spec {
	files := []File{
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte(
			"root:x:0:0:root:/root:/sbin/nologin\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte(
			"root:x:0:\n" +
				"nobody:x:65534:\n" +
				"nonroot:x:65532:\n")},
		{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		{Path: "/root", Mode: fs.ModeDir | 0o700},
		{Path: NonrootHome, Mode: fs.ModeDir | 0o700, UID: NonrootUID, GID: NonrootUID},
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
	}
	env := []string{"PATH=" + DefaultPath}
	if len(caBundle) > 0 {
		files = append(files, File{Path: CABundlePath, Mode: 0o644, Data: caBundle})
		env = append(env, "SSL_CERT_FILE="+CABundlePath)
	}
	return Spec{
		Files:  files,
		Config: Config{User: "65532", WorkingDir: NonrootHome, Env: env},
	}
}
