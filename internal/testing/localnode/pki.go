package localnode

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// authority is the cluster's one certificate authority: it signs the API server's serving
// certificate and the client certificates of the components and the admin. A local cluster lives
// for one run, so its certificates are good for a day.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

func newAuthority() (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("localnode: CA key: %w", err)
	}
	tmpl, err := certTemplate("baton-node-ca")
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("localnode: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("localnode: CA certificate: %w", err)
	}
	return &authority{cert: cert, key: key, pem: pemCert(der)}, nil
}

// keyPair is a PEM certificate and key.
type keyPair struct{ cert, key []byte }

// serving issues a server certificate for the given names and addresses.
func (a *authority) serving(name string, dnsNames []string, ips []net.IP) (keyPair, error) {
	return a.issue(pkix.Name{CommonName: name}, dnsNames, ips, x509.ExtKeyUsageServerAuth)
}

// client issues a client certificate: the API server takes CommonName as the user and
// Organization as the groups.
func (a *authority) client(user string, groups ...string) (keyPair, error) {
	return a.issue(pkix.Name{CommonName: user, Organization: groups}, nil, nil, x509.ExtKeyUsageClientAuth)
}

func (a *authority) issue(subject pkix.Name, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("localnode: key for %s: %w", subject.CommonName, err)
	}
	tmpl, err := certTemplate(subject.CommonName)
	if err != nil {
		return keyPair{}, err
	}
	tmpl.Subject = subject
	tmpl.DNSNames, tmpl.IPAddresses = dnsNames, ips
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("localnode: certificate for %s: %w", subject.CommonName, err)
	}
	keyPEM, err := pemKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{cert: pemCert(der), key: keyPEM}, nil
}

// serviceAccountKey returns a new key pair for signing service account tokens: the private key
// (for the API server and the controller manager) and the public key (to verify them), as PEM.
func serviceAccountKey() (private, public []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("localnode: service account key: %w", err)
	}
	private, err = pemKey(key)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("localnode: service account key: %w", err)
	}
	return private, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func certTemplate(name string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("localnode: serial for %s: %w", name, err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
	}, nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("localnode: encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
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
