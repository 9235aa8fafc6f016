package testpki

import (
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
	"testing"
	"time"
)

// CA is a throwaway certificate authority: for one test, or one local cluster's run.
type CA struct {
	// PEM is the CA certificate.
	PEM  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	Cert, Key []byte
}

// Request describes a certificate for CA.Sign.
type Request struct {
	// Subject is the certificate's subject. The Kubernetes API server takes a client
	// certificate's CommonName as the user and its Organization as the groups.
	Subject pkix.Name
	// DNSNames and IPs are the subject alternative names.
	DNSNames []string
	IPs      []net.IP
	// Usage is the extended key usage (server auth, client auth or both).
	Usage []x509.ExtKeyUsage
}

// New returns a new CA whose certificate is called name. Its certificates, like its own, are good
// from an hour ago for a day.
func New(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testpki: CA key: %w", err)
	}
	tmpl, err := template(name)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testpki: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testpki: CA certificate: %w", err)
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Sign issues a certificate for req, signed by ca, with a new key.
func (ca *CA) Sign(req Request) (Pair, error) {
	name := req.Subject.CommonName
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("testpki: key for %s: %w", name, err)
	}
	tmpl, err := template(name)
	if err != nil {
		return Pair{}, err
	}
	tmpl.Subject = req.Subject
	tmpl.DNSNames, tmpl.IPAddresses = req.DNSNames, req.IPs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = req.Usage
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("testpki: certificate for %s: %w", name, err)
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return Pair{}, err
	}
	return Pair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Key: keyPEM}, nil
}

// KeyPEM encodes an ECDSA private key as an "EC PRIVATE KEY" PEM block.
func KeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testpki: encoding a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// NewCA returns a new CA for a test; it fails t on error.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := New("baton test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Issue returns a certificate signed by ca for name, good for servers (with name as its DNS name)
// and clients; it fails t on error.
func (ca *CA) Issue(t testing.TB, name string) Pair {
	t.Helper()
	p, err := ca.Sign(Request{Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// WriteFile writes data to name in dir (created if needed) and returns its path; it fails t on
// error.
func WriteFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// template is a certificate called name, good from an hour ago for a day, with a random serial.
func template(name string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("testpki: serial for %s: %w", name, err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
	}, nil
}
