package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"slices"
	"testing"
)

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssueVerifiesForServerAndClient(t *testing.T) {
	ca := NewCA(t)
	pair := ca.Issue(t, "svc.example")
	if _, err := tls.X509KeyPair(pair.Cert, pair.Key); err != nil {
		t.Fatalf("certificate and key do not match: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM) {
		t.Fatal("CA PEM not accepted")
	}
	cert := parse(t, pair.Cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "svc.example", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("usage %v: %v", usage, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example"}); err == nil {
		t.Error("verified for a name it was not issued for")
	}
}

func TestSignKeepsSubjectNamesAndUsage(t *testing.T) {
	ca, err := New("node-ca")
	if err != nil {
		t.Fatal(err)
	}
	if c := parse(t, ca.PEM); !c.IsCA || c.Subject.CommonName != "node-ca" {
		t.Errorf("CA certificate: IsCA %v, CN %q", c.IsCA, c.Subject.CommonName)
	}
	pair, err := ca.Sign(Request{Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, pair.Cert)
	if c.Subject.CommonName != "admin" || !slices.Equal(c.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject %v, want CN admin, O system:masters", c.Subject)
	}
	if len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("IP SANs %v", c.IPAddresses)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage %v, want client auth only", c.ExtKeyUsage)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client-only certificate verified for server auth")
	}
}
