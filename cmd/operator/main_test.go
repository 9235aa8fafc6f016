package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/sidecarcontract"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-operator-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "operator")
	// The commit as a release build states it (-X): this machine's go env may turn VCS stamping
	// off (GOFLAGS=-buildvcs=false), and a git worktree is not stamped anyway. TestVersion fails
	// when git cannot tell it.
	var ldflags string
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		ldflags = "-X github.com/baton-dev/baton/internal/version.commit=" + strings.TrimSpace(string(head))
	}
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", binary, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the operator binary with a clean environment and returns its output and exit code.
func run(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatal(err)
		return "", -1
	}
}

func TestHelp(t *testing.T) {
	out, code := run(t, nil, "-h")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{"-sidecar-image", "-webhook-certs", "-global-namespaces", "-leader-elect", "-health-probe-bind-address", "-sidecar-hint-port", "-sidecar-metrics-port",
		"-cassandra-allow-anonymous", "-cassandra-allowed-hosts", "-cassandra-operator-keyspaces", "-cassandra-ensure-schema", "-cassandra-schema-replication"} {
		if !strings.Contains(out, want) {
			t.Errorf("-h output lacks %s", want)
		}
	}
}

func TestBadSettingsAreAllReported(t *testing.T) {
	out, code := run(t, nil, "--webhook-certs=sometimes", "--sidecar-memory-limit=lots", "--status-interval=1ms", "--sidecar-hint-port=80", "--sidecar-metrics-port=81",
		"--operator-keyspaces=baton,9lives", "--schema-replication=", "--sidecar-image-pull-policy=Sometimes", "--sidecar-shutdown-timeout=1h",
		"--cassandra-hosts=a b", "--cassandra-consistency=ONE", "--cassandra-serial-consistency=QUORUM", "--global-namespaces=Team_A")
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s", code, out)
	}
	for _, want := range []string{
		`--sidecar-memory-limit="lots"`, "--sidecar-image is empty", "--namespace is empty and POD_NAMESPACE is not set",
		`--webhook-certs="sometimes": use self or external`, "--status-interval=1ms", "--sidecar-hint-port=80: use 1024 to 65535", "--sidecar-metrics-port=81: use 1024 to 65535",
		`--cassandra-operator-keyspaces: "9lives" is not a keyspace name`, "--cassandra-schema-replication is empty", // set by their old names
		`--sidecar-image-pull-policy="Sometimes": use Always, IfNotPresent or Never`, "--sidecar-shutdown-timeout=1h0m0s: use",
		`--cassandra-hosts: "a b"`, `--cassandra-consistency="ONE": use`, `--cassandra-serial-consistency="QUORUM": use`, `--global-namespaces: "Team_A" is not a namespace name`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Every problem names the flag that fixes it.
	for _, problem := range regexp.MustCompile(`operator: |; `).Split(out, -1) {
		if problem = strings.TrimSpace(problem); problem != "" && !strings.Contains(problem, "--") {
			t.Errorf("a problem names no flag: %q", problem)
		}
	}
	out, code = run(t, nil, "--no-such-flag")
	if code != 2 || !strings.Contains(out, "run with -h") {
		t.Errorf("unknown flag: exit %d:\n%s", code, out)
	}
}

func TestNoClusterIsAClearError(t *testing.T) {
	out, code := run(t, []string{"POD_NAMESPACE=baton-system", "KUBERNETES_SERVICE_HOST=", "KUBECONFIG=" + filepath.Join(t.TempDir(), "none")},
		"--sidecar-image=ghcr.io/baton-dev/baton:v0.1.0")
	if code != 1 || !strings.Contains(out, "Kubernetes") {
		t.Errorf("exit %d, want 1 with a message about the Kubernetes configuration:\n%s", code, out)
	}
}

// TestVersion: --version (and -version) prints the version and the commit the binary was built
// from (set with -X by TestMain, as a release build does) and exits 0 before the operator checks
// its settings or looks for a cluster.
func TestVersion(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD (the test builds from this checkout): %v", err)
	}
	for _, flag := range []string{"--version", "-version"} {
		out, code := run(t, nil, flag)
		if code != 0 || !strings.HasPrefix(out, "baton-operator ") || !strings.Contains(out, "commit "+strings.TrimSpace(string(head))) {
			t.Errorf("operator %s: exit %d, output %q; want baton-operator VERSION commit %s", flag, code, out, strings.TrimSpace(string(head)))
		}
	}
}

// TestSettingsNamedAsTheSidecars: the operator's flags for the lock store settings it shares with
// the sidecar carry the sidecar's flag names (which are named after their BATON_* variables).
func TestSettingsNamedAsTheSidecars(t *testing.T) {
	out, _ := run(t, nil, "-h")
	for _, s := range []sidecarcontract.Setting{sidecarcontract.CassandraHosts, sidecarcontract.Keyspace, sidecarcontract.LocalDC,
		sidecarcontract.Consistency, sidecarcontract.SerialConsistency, sidecarcontract.UsernameFile, sidecarcontract.PasswordFile,
		sidecarcontract.TLSCA, sidecarcontract.TLSCert, sidecarcontract.TLSKey} {
		if !regexp.MustCompile(`(?m)^  -` + s.Flag() + `\b`).MatchString(out) {
			t.Errorf("the operator has no flag -%s for the sidecar's %s", s.Flag(), s)
		}
	}
}

// TestOldFlagNames: the flags renamed after their chart values (cassandra.allowAnonymous:
// --cassandra-allow-anonymous) still work under their old names, which -h marks deprecated.
func TestOldFlagNames(t *testing.T) {
	help, _ := run(t, nil, "-h")
	for old, name := range map[string]string{"allow-anonymous-cassandra": "cassandra-allow-anonymous", "operator-keyspaces": "cassandra-operator-keyspaces",
		"ensure-schema": "cassandra-ensure-schema", "schema-replication": "cassandra-schema-replication"} {
		if !regexp.MustCompile(`(?m)^  -` + old + `\b.*\n\s+deprecated: use --` + name + `\b`).MatchString(help) {
			t.Errorf("-h does not mark -%s deprecated for --%s:\n%s", old, name, help)
		}
	}
	// A bool alias takes no value, like the flag it stands for; the run then fails for want of a
	// sidecar image, not because of the flag.
	out, code := run(t, nil, "--allow-anonymous-cassandra", "--ensure-schema=false", "--namespace=x")
	if code != 2 || strings.Contains(out, "flag provided but not defined") || !strings.Contains(out, "--sidecar-image is empty") {
		t.Errorf("old bool flags: exit %d:\n%s", code, out)
	}
}
