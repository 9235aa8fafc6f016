package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/fakesidecar"
)

func TestUsageErrors(t *testing.T) {
	notSocket := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notSocket, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no command", nil, nil, "Usage:"},
		{"unknown command", []string{"frob"}, nil, `unknown command "frob": the commands are raise-tokens, run, schema, status, version, wait and yield`},
		{"flag before command", []string{"--json", "status"}, nil, "flag --json before the command"},
		{"unknown flag", []string{"status", "--color"}, nil, "flag provided but not defined: --color"},
		{"status argument", []string{"status", "extra"}, nil, `unexpected argument "extra"`},
		{"help unknown topic", []string{"help", "frob"}, nil, `no help for "frob"`},
		{"bad timeout", []string{"wait", "--timeout", "soon"}, nil, `invalid value "soon" for flag --timeout: want a duration such as 30s`},
		{"negative wait", []string{"run", "--wait", "-1s", "--", "true"}, nil, "want a duration of 0 or more"},
		{"bad grace", []string{"run", "--grace", "10", "--", "true"}, nil, `invalid value "10" for flag --grace`},
		{"missing --", []string{"run", "--lock", "orders", "sh", "-c", "true"}, nil,
			`missing -- before the command "sh": write baton run [flags] -- sh -c true`},
		{"nothing after --", []string{"run", "--lock", "orders", "--"}, nil, "no command to run"},
		{"wait takes no command", []string{"wait", "--", "true"}, nil, "baton wait takes no command after --"},
		{"bad lock ID", []string{"run", "--lock", "a b", "--", "true"}, nil, `--lock "a b"`},
		{"direct mode without --lock", []string{"run", "--cassandra-hosts", "127.0.0.1", "--", "true"}, nil,
			"--lock is required with --cassandra-hosts"},
		{"direct mode from env without --lock", []string{"run", "--", "true"},
			map[string]string{"BATON_CASSANDRA_HOSTS": "127.0.0.1"}, "--lock is required with --cassandra-hosts"},
		{"lease out of range", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--lease", "2h", "--", "true"}, nil,
			"--lease is 2h0m0s: give a duration from 1s to 1h0m0s"},
		{"hint address by name", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--hint-addr", "worker-1:9465", "--", "true"}, nil,
			`--hint-addr "worker-1:9465": give an IP address other processes reach this one at and a port`},
		{"hint address on every interface", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--hint-addr", "0.0.0.0:9465", "--", "true"}, nil,
			`--hint-addr "0.0.0.0:9465"`},
		{"hint address on loopback", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--hint-addr", "127.0.3.1:9465", "--", "true"}, nil,
			`--hint-addr "127.0.3.1:9465" is a loopback address`},
		{"loopback hints without hosts", []string{"run", "--socket", missing, "--hint-allow-loopback", "--", "true"}, nil,
			"--hint-allow-loopback applies only without a sidecar"},
		{"hint address without hosts", []string{"run", "--socket", missing, "--hint-addr", "198.18.0.7:9465", "--", "true"}, nil,
			"--hint-addr applies only without a sidecar"},
		{"lease without hosts", []string{"run", "--socket", missing, "--lease", "5s", "--", "true"}, nil,
			"--lease applies only without a sidecar: give --cassandra-hosts"},
		{"run without socket", []string{"run", "--socket", missing, "--", "true"}, nil,
			"no sidecar socket at " + missing + ": is the pod annotated with baton.dev/lock? For use outside Kubernetes give --cassandra-hosts"},
		{"status socket from env", []string{"status"}, map[string]string{"BATON_SOCKET": missing},
			"no sidecar socket at " + missing},
		{"wait on a file", []string{"wait", "--socket", notSocket}, nil, notSocket + " is not a socket"},
		{"consistency without hosts", []string{"run", "--socket", missing, "--consistency", "ALL", "--", "true"}, nil,
			"--consistency applies only without a sidecar: give --cassandra-hosts (BATON_CASSANDRA_HOSTS) too, or drop --consistency"},
		{"TLS without hosts", []string{"run", "--socket", missing, "--cassandra-tls-ca", notSocket, "--", "true"}, nil,
			"--cassandra-tls-ca applies only without a sidecar"},
		{"weak consistency", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--consistency", "one", "--", "true"}, nil,
			`--cassandra-consistency (BATON_CASSANDRA_CONSISTENCY) is "ONE": a lock needs QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL`},
		{"serial consistency from env", []string{"run", "--lock", "x", "--", "true"},
			map[string]string{"BATON_CASSANDRA_HOSTS": "h", "BATON_CASSANDRA_SERIAL_CONSISTENCY": "quorum"},
			`--cassandra-serial-consistency (BATON_CASSANDRA_SERIAL_CONSISTENCY) is "QUORUM": use SERIAL or LOCAL_SERIAL`},
		{"local consistency without DC", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--consistency", "LOCAL_QUORUM", "--", "true"}, nil,
			"--cassandra-local-dc (BATON_CASSANDRA_LOCAL_DC) is empty but LOCAL_QUORUM/SERIAL are data-centre local"},
		{"password without user", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--cassandra-password-file", notSocket, "--", "true"}, nil,
			"--cassandra-password-file (BATON_CASSANDRA_PASSWORD_FILE) and --cassandra-username-file (BATON_CASSANDRA_USERNAME_FILE) must be given together"},
		{"missing CA file", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--", "true"},
			map[string]string{"BATON_CASSANDRA_TLS_CA": missing}, "--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA) cannot be read"},
		{"CA not PEM", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--cassandra-tls-ca", notSocket, "--", "true"}, nil,
			"--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA) names " + notSocket + ", which holds no PEM certificate"},
		{"several problems", []string{"run", "--cassandra-hosts", "h", "--lock", "x", "--consistency", "one", "--cassandra-cluster-name", "a\nb", "--", "true"}, nil,
			"invalid Cassandra settings:\n  --cassandra-consistency (BATON_CASSANDRA_CONSISTENCY) is \"ONE\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := runCLI(t, &invocation{args: tc.args, env: tc.env})
			if inv.code != ExitUsage {
				t.Fatalf("exit %d, want 2; stderr: %s", inv.code, inv.stderr.String())
			}
			if got := inv.stderr.String(); !strings.Contains(got, tc.want) {
				t.Errorf("stderr = %q\nwant it to contain %q", got, tc.want)
			}
			if inv.stdout.String() != "" {
				t.Errorf("stdout = %q, want nothing on a usage error", inv.stdout.String())
			}
		})
	}
}

func TestUsageUnknownLock(t *testing.T) {
	f := &fakesidecar.Service{T: t, Events: true}
	f.StaticLocks(waitOrders, idleReport)
	sock := fakesidecar.Serve(t, f)
	inv := runCLI(t, &invocation{args: []string{"wait", "--socket", sock, "--lock", "nope"}})
	if inv.code != ExitUsage || !strings.Contains(inv.stderr.String(), `lock "nope" is not declared for this pod (declared: orders, report)`) {
		t.Errorf("exit %d, stderr %q", inv.code, inv.stderr.String())
	}
	// run without --lock needs exactly one declared lock.
	inv = runCLI(t, &invocation{args: []string{"run", "--socket", sock, "--", "true"}})
	if inv.code != ExitUsage || !strings.Contains(inv.stderr.String(), "--lock is required: the pod declares 2 locks (orders, report)") {
		t.Errorf("exit %d, stderr %q", inv.code, inv.stderr.String())
	}
}

// TestRunUsageNamesEveryFlag: every flag of baton run is in its usage, the Cassandra settings with
// their environment variables.
func TestRunUsageNamesEveryFlag(t *testing.T) {
	inv := runCLI(t, &invocation{args: []string{"help", "run"}})
	help := inv.stdout.String()
	for _, f := range append([]string{"socket", "lock", "wait", "grace"}, directOnly...) {
		if !regexp.MustCompile(`--` + f + `[ :]`).MatchString(help) { // "--keyspace:" as a deprecated alias
			t.Errorf("baton help run does not mention --%s", f)
		}
	}
	for _, s := range sidecarcontract.CassandraSettings() {
		if !regexp.MustCompile(`--` + s.Flag() + ` +` + s.Env() + ` `).MatchString(help) {
			t.Errorf("baton help run does not list %s", s)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "run"}, {"run", "-h"}, {"status", "--help"}, {"wait", "-h"}} {
		inv := runCLI(t, &invocation{args: args})
		if inv.code != 0 || !strings.Contains(inv.stdout.String(), "Usage") || inv.stderr.String() != "" {
			t.Errorf("baton %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), inv.code, inv.stdout.String(), inv.stderr.String())
		}
	}
}

// TestEveryCommandIsListed: every command of the overview's Usage lines has its own help, and the
// messages that list the commands (an unknown command, help on an unknown topic) name all of them.
func TestEveryCommandIsListed(t *testing.T) {
	overview := runCLI(t, &invocation{args: []string{"help"}}).stdout.String()
	var commands []string
	for _, m := range regexp.MustCompile(`(?m)^  baton ([a-z-]+)`).FindAllStringSubmatch(overview, -1) {
		if c := m[1]; c != "help" && !slices.Contains(commands, c) {
			commands = append(commands, c)
		}
	}
	if !slices.Contains(commands, "version") || !slices.Contains(commands, "yield") {
		t.Errorf("baton help lists the commands %v; want version and yield among them", commands)
	}
	unknown := runCLI(t, &invocation{args: []string{"frob"}}).stderr.String()
	noTopic := runCLI(t, &invocation{args: []string{"help", "frob"}}).stderr.String()
	for _, c := range commands {
		if inv := runCLI(t, &invocation{args: []string{"help", c}}); inv.code != 0 || !strings.Contains(inv.stdout.String(), "Usage: baton "+c) {
			t.Errorf("baton help %s: exit %d, stdout %q", c, inv.code, inv.stdout.String())
		}
		for what, msg := range map[string]string{"unknown command": unknown, "help on an unknown topic": noTopic} {
			if !regexp.MustCompile(`\b` + c + `\b`).MatchString(msg) {
				t.Errorf("the message on %s does not name %s: %q", what, c, msg)
			}
		}
	}
}

// TestVersion: baton version, --version and -version print the version and commit line.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		inv := runCLI(t, &invocation{args: args})
		if inv.code != 0 || !regexp.MustCompile(`^baton \S+ commit \S+`).MatchString(inv.stdout.String()) || inv.stderr.String() != "" {
			t.Errorf("baton %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), inv.code, inv.stdout.String(), inv.stderr.String())
		}
	}
	if inv := runCLI(t, &invocation{args: []string{"version", "extra"}}); inv.code != ExitUsage {
		t.Errorf("baton version extra: exit %d, want 2", inv.code)
	}
}
