package certfiles_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/baton-dev/baton/internal/certfiles"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

func TestMain(m *testing.M) { testenv.VerifyTestMain(m, nil) }

var keys = []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt"}

// start runs a Mirror of Secret baton-system/webhook-tls into a new directory against an
// in-memory fake clientset, until the test ends, and returns the clientset and the directory.
func start(t *testing.T, initial *corev1.Secret) (*fake.Clientset, string) {
	t.Helper()
	cs := fake.NewClientset()
	if initial != nil {
		if err := cs.Tracker().Add(initial); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "certs")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	m := &certfiles.Mirror{Client: cs, Namespace: "baton-system", Name: "webhook-tls", Dir: dir, Keys: keys,
		Log: testr.New(t), Retry: 20 * time.Millisecond}
	go func() { errc <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return cs, dir
}

func secret(data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "baton-system", Name: "webhook-tls"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// waitForFile waits until dir/name holds want.
func waitForFile(t *testing.T, dir, name, want string) {
	t.Helper()
	var got string
	testenv.WaitFor(t, name+" = "+want, 10*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		got = string(b)
		return got == want
	})
}

func TestWritesTheSecretAndFollowsItsUpdates(t *testing.T) {
	cs, dir := start(t, secret(map[string]string{"tls.crt": "cert-1", "tls.key": "key-1", "ca.crt": "ca-1", "other": "not mirrored"}))
	waitForFile(t, dir, "tls.crt", "cert-1")
	waitForFile(t, dir, "tls.key", "key-1")
	waitForFile(t, dir, "ca.crt", "ca-1")
	info, err := os.Stat(filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("tls.key mode %v, want 0600", info.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); !os.IsNotExist(err) {
		t.Errorf("a key not asked for was written: %v", err)
	}

	// A rotation: the files follow.
	if _, err := cs.CoreV1().Secrets("baton-system").Update(t.Context(),
		secret(map[string]string{"tls.crt": "cert-2", "tls.key": "key-2", "ca.crt": "ca-1"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, dir, "tls.crt", "cert-2")
	waitForFile(t, dir, "tls.key", "key-2")

	// An emptied key leaves its file as it was: a server never loses its certificate.
	if _, err := cs.CoreV1().Secrets("baton-system").Update(t.Context(),
		secret(map[string]string{"tls.crt": "", "tls.key": "key-3"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, dir, "tls.key", "key-3")
	waitForFile(t, dir, "tls.crt", "cert-2")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("directory holds %d entries, want tls.crt, tls.key and ca.crt only (no temporary files left)", len(entries))
	}
}

// TestWaitsForTheSecret: the chart's Secret may be created, empty, after the operator starts,
// and filled later by the certificate rotator.
func TestWaitsForTheSecret(t *testing.T) {
	cs, dir := start(t, nil)
	if _, err := cs.CoreV1().Secrets("baton-system").Create(t.Context(),
		secret(map[string]string{"tls.crt": "", "tls.key": ""}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets("baton-system").Update(t.Context(),
		secret(map[string]string{"tls.crt": "cert-1", "tls.key": "key-1"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, dir, "tls.crt", "cert-1")
	waitForFile(t, dir, "tls.key", "key-1")
}

// TestRetriesAFailedWrite: a write that fails (here a directory in the way of tls.crt) is tried
// again without another change of the Secret.
func TestRetriesAFailedWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	blocker := filepath.Join(dir, "tls.crt", "x")
	if err := os.MkdirAll(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(secret(map[string]string{"tls.crt": "cert-1", "tls.key": "key-1"}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := make(chan struct{}, 100)
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, "retrying") {
			failed <- struct{}{}
		}
	}, funcr.Options{})
	m := &certfiles.Mirror{Client: cs, Namespace: "baton-system", Name: "webhook-tls", Dir: dir, Keys: keys,
		Log: log, Retry: 20 * time.Millisecond}
	errc := make(chan error, 1)
	go func() { errc <- m.Start(ctx) }()
	// The write fails while the directory is there, and again after Retry; the Secret does not
	// change after that, so only a retry can write the files.
	for range 2 {
		select {
		case <-failed:
		case <-time.After(10 * time.Second):
			t.Fatal("no failed write logged in 10s")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tls.key")); !os.IsNotExist(err) {
		t.Errorf("tls.key written although tls.crt, before it, failed: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "tls.crt")); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, dir, "tls.crt", "cert-1")
	waitForFile(t, dir, "tls.key", "key-1")
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Start: %v", err)
	}
}

func TestRefusesAnIncompleteMirror(t *testing.T) {
	err := (&certfiles.Mirror{Namespace: "baton-system", Name: "webhook-tls", Dir: t.TempDir(), Keys: keys}).Start(t.Context())
	if err == nil {
		t.Fatal("Start without a client succeeded")
	}
}
