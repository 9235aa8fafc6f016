package localnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/baton-dev/baton/internal/testing/testpki"
)

// authority is the cluster's one certificate authority (a testpki.CA): it signs the API server's
// serving certificate and the client certificates of the components and the admin. A local
// cluster lives for one run, so its certificates are good for a day.
type authority struct{ *testpki.CA }

func newAuthority() (*authority, error) {
	ca, err := testpki.New("baton-node-ca")
	if err != nil {
		return nil, fmt.Errorf("localnode: %w", err)
	}
	return &authority{ca}, nil
}

// serving issues a server certificate for the given names and addresses.
func (a *authority) serving(name string, dnsNames []string, ips []net.IP) (testpki.Pair, error) {
	return a.sign(testpki.Request{Subject: pkix.Name{CommonName: name}, DNSNames: dnsNames, IPs: ips,
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// client issues a client certificate: the API server takes CommonName as the user and
// Organization as the groups.
func (a *authority) client(user string, groups ...string) (testpki.Pair, error) {
	return a.sign(testpki.Request{Subject: pkix.Name{CommonName: user, Organization: groups},
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (a *authority) sign(req testpki.Request) (testpki.Pair, error) {
	p, err := a.Sign(req)
	if err != nil {
		return testpki.Pair{}, fmt.Errorf("localnode: %w", err)
	}
	return p, nil
}

// serviceAccountKey returns a new key pair for signing service account tokens: the private key
// (for the API server and the controller manager) and the public key (to verify them), as PEM.
func serviceAccountKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("localnode: service account key: %w", err)
	}
	private, err = testpki.KeyPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("localnode: service account key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("localnode: service account key: %w", err)
	}
	return private, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// writePrivateFiles writes each name (relative to dir) with its content, private (0600), creating
// directories as needed, and returns the absolute paths by name.
func writePrivateFiles(dir string, files map[string][]byte) (map[string]string, error) {
	paths := make(map[string]string, len(files))
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("localnode: %w", err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return nil, fmt.Errorf("localnode: %w", err)
		}
		paths[name] = p
	}
	return paths, nil
}
