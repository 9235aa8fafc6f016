package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/internal/testing/testpki"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

const testKeyspace = "baton_cli_test"

var schemaOnce sync.Once

// directArgs returns the flags of a direct-mode run against the test cluster; the first run of
// the binary creates the schema.
func directArgs(t *testing.T, lockID string, extra ...string) []string {
	t.Helper()
	hosts := strings.Join(single.Cluster(t).Hosts(), ",")
	args := []string{"run", "--cassandra-hosts", hosts, "--keyspace", testKeyspace, "--lease", "3s", "--lock", lockID}
	schemaOnce.Do(func() { args = append(args, "--create-schema") })
	return append(args, extra...)
}

// token parses the fencing token a child printed.
func token(t *testing.T, inv *invocation) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(inv.stdout.String()), 10, 64)
	if err != nil {
		t.Fatalf("child printed %q, want a token; stderr: %s", inv.stdout.String(), inv.stderr.String())
	}
	return n
}

func TestDirectRunIsExclusiveAndTokensGrow(t *testing.T) {
	lockID := fmt.Sprintf("cli-exclusive-%d", time.Now().UnixNano())

	// 1. The first run holds the lock until the test closes its stdin.
	first, hold := holding(t, 1001, lockID)
	tok1 := token(t, first)

	// 2. A second run with --wait 0 gives up with 75 and names the holder.
	second := runCLI(t, &invocation{pid: 1002, args: directArgs(t, lockID, "--wait", "0", "--", "sh", "-c", `echo "$BATON_TOKEN"`)})
	if second.code != ExitTempFail {
		t.Fatalf("second run: exit %d, want 75; stderr: %s", second.code, second.stderr.String())
	}
	wantHolder := regexp.MustCompile(fmt.Sprintf(`lock %q held by host/%s/1001/[0-9a-f]{8} \(token %d\)`,
		lockID, regexp.QuoteMeta(hostname()), tok1))
	if !wantHolder.MatchString(second.stderr.String()) {
		t.Errorf("second run stderr = %q, want it to match %q", second.stderr.String(), wantHolder)
	}
	if second.stdout.String() != "" {
		t.Errorf("second run's child ran: %q", second.stdout.String())
	}

	// 3. A third run that may wait gets the lock once the first child exits and releases it.
	third := start(t, &invocation{pid: 1003, args: directArgs(t, lockID, "--wait", "1m", "--", "sh", "-c", `echo "$BATON_TOKEN"; exit 4`)})
	if err := hold.Close(); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, time.Minute); code != 0 {
		t.Fatalf("first run: exit %d, stderr: %s", code, first.stderr.String())
	}
	if code := third.wait(t, time.Minute); code != 4 {
		t.Fatalf("third run: exit %d, want the child's 4; stderr: %s", code, third.stderr.String())
	}
	if tok3 := token(t, third); tok3 <= tok1 {
		t.Errorf("token did not grow: first %d, third %d", tok1, tok3)
	}

	// 4. And a plain try afterwards still gets a larger token.
	fourth := runCLI(t, &invocation{pid: 1004, args: directArgs(t, lockID, "--", "sh", "-c", `echo "$BATON_TOKEN"`)})
	if fourth.code != 0 {
		t.Fatalf("fourth run: exit %d, stderr: %s", fourth.code, fourth.stderr.String())
	}
	if tok4, tok3 := token(t, fourth), token(t, third); tok4 <= tok3 {
		t.Errorf("token did not grow: third %d, fourth %d", tok3, tok4)
	}
}

// holding starts a direct run as process pid that holds lockID until the returned closer is
// closed, and returns once it holds the lock.
func holding(t *testing.T, pid int, lockID string) (*invocation, io.Closer) {
	t.Helper()
	stdin, hold := io.Pipe()
	inv := start(t, &invocation{pid: pid, stdin: stdin,
		args: directArgs(t, lockID, "--wait", "0", "--", "sh", "-c", `echo "$BATON_TOKEN"; read x || true`)})
	testenv.WaitFor(t, "the run to hold the lock", time.Minute, func() bool {
		select {
		case <-inv.done:
			t.Fatalf("run of pid %d exited %d: %s", pid, inv.code, inv.stderr.String())
		default:
		}
		return strings.HasSuffix(inv.stdout.String(), "\n")
	})
	return inv, hold
}

// TestDirectRunSameHostAndPIDAreTwoOwners: two processes with one host name and PID (PID 1 in two
// containers of one pod) are two owners: the second must not be granted the first one's lock.
func TestDirectRunSameHostAndPIDAreTwoOwners(t *testing.T) {
	lockID := fmt.Sprintf("cli-same-pid-%d", time.Now().UnixNano())
	first, hold := holding(t, 1, lockID)
	second := runCLI(t, &invocation{pid: 1, args: directArgs(t, lockID, "--wait", "2s", "--", "sh", "-c", `echo "$BATON_TOKEN"`)})
	if second.code != ExitTempFail || second.stdout.String() != "" {
		t.Errorf("second process with the same host name and PID: exit %d, child output %q, want 75 and no child; stderr: %s",
			second.code, second.stdout.String(), second.stderr.String())
	}
	if err := hold.Close(); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, time.Minute); code != 0 {
		t.Fatalf("first run: exit %d, stderr: %s", code, first.stderr.String())
	}
}

func TestDirectRunStopsChildWhenLeaseEnds(t *testing.T) {
	// An operator revokes the grant; the lease learns it at its next renewal and ends, and baton
	// stops the child and exits 75.
	lockID := fmt.Sprintf("cli-revoked-%d", time.Now().UnixNano())
	inv := start(t, &invocation{pid: 2001, args: directArgs(t, lockID, "--grace", "5s", "--verbose", "--",
		"sh", "-c", `echo "$BATON_TOKEN"; exec sleep 30`)})
	testenv.WaitFor(t, "the run to hold the lock", time.Minute, func() bool {
		select {
		case <-inv.done:
			t.Fatalf("run exited %d: %s", inv.code, inv.stderr.String())
		default:
		}
		return strings.HasSuffix(inv.stdout.String(), "\n")
	})
	tok := token(t, inv)

	revoked := revoke(t, lockID, tok)
	if code := inv.wait(t, 30*time.Second); code != ExitTempFail {
		t.Fatalf("exit %d, want 75; stderr: %s", code, inv.stderr.String())
	}
	if el := time.Since(revoked); el > 10*time.Second {
		t.Errorf("child stopped %v after the revocation; the lease is 3s", el)
	}
	want := fmt.Sprintf("lost lock %q (token %d) while sh ran: lock: grant revoked", lockID, tok)
	if !strings.Contains(inv.stderr.String(), want) {
		t.Errorf("stderr = %q, want it to contain %q", inv.stderr.String(), want)
	}
	// --verbose dates the hold as the sidecar's events do: since the grant, until the lease ended.
	since := verboseTime(t, inv.stderr.String(), "lock held", tok, "since")
	ended := verboseTime(t, inv.stderr.String(), "lock lost", tok, "ended")
	if !since.Before(revoked) || ended.Before(revoked) || ended.After(time.Now()) {
		t.Errorf("held since %s, lost at %s; revoked at %s", since, ended, revoked)
	}
}

// verboseTime finds the --verbose log line msg about token and returns its time field.
func verboseTime(t *testing.T, stderr, msg string, token int64, field string) time.Time {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`"msg"="%s".*"token"=%d.*"%s"="([^"]+)"`, regexp.QuoteMeta(msg), token, field))
	m := re.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no %q line with token %d and %s in stderr: %s", msg, token, field, stderr)
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("%s %q: %v", field, m[1], err)
	}
	return at
}

func TestDirectRunUnreachableCassandra(t *testing.T) {
	inv := runCLI(t, &invocation{args: []string{"run", "--cassandra-hosts", "127.0.0.1:1", "--lock", "x", "--", "true"}})
	if inv.code != ExitFailure || !strings.Contains(inv.stderr.String(), "cannot connect to Cassandra at 127.0.0.1:1") {
		t.Errorf("exit %d, stderr %q", inv.code, inv.stderr.String())
	}
	// With TLS and a password from the environment, the message names those settings too.
	dir := t.TempDir()
	ca := testpki.NewCA(t)
	inv = runCLI(t, &invocation{args: []string{"run", "--lock", "x", "--", "true"}, env: map[string]string{
		"BATON_CASSANDRA_HOSTS":         "127.0.0.1:1",
		"BATON_CASSANDRA_TLS_CA":        testpki.WriteFile(t, dir, "ca.crt", ca.PEM),
		"BATON_CASSANDRA_USERNAME_FILE": testpki.WriteFile(t, dir, "user", []byte("baton")),
		"BATON_CASSANDRA_PASSWORD_FILE": testpki.WriteFile(t, dir, "pass", []byte("s3cret")),
	}})
	for _, want := range []string{"cannot connect to Cassandra at 127.0.0.1:1", "--cassandra-tls-ca (BATON_CASSANDRA_TLS_CA)",
		"--cassandra-username-file (BATON_CASSANDRA_USERNAME_FILE)"} {
		if inv.code != ExitFailure || !strings.Contains(inv.stderr.String(), want) {
			t.Errorf("exit %d, stderr %q; want it to mention %q", inv.code, inv.stderr.String(), want)
		}
	}
	if strings.Contains(inv.stderr.String(), "s3cret") {
		t.Errorf("stderr shows the password: %q", inv.stderr.String())
	}
}

// TestDirectRunCassandraSettings: the sidecar's Cassandra settings reach the lock store in direct
// mode: a local data centre with LOCAL_QUORUM works, and a cluster name other than the cluster's
// is refused.
func TestDirectRunCassandraSettings(t *testing.T) {
	lockID := fmt.Sprintf("cli-settings-%d", time.Now().UnixNano())
	inv := runCLI(t, &invocation{args: directArgs(t, lockID, "--local-dc", "datacenter1", "--consistency", "LOCAL_QUORUM",
		"--", "sh", "-c", `echo "$BATON_TOKEN"`)})
	if inv.code != 0 || token(t, inv) <= 0 {
		t.Fatalf("LOCAL_QUORUM in datacenter1: exit %d, stderr %s", inv.code, inv.stderr.String())
	}
	inv = runCLI(t, &invocation{args: directArgs(t, lockID, "--", "true"),
		env: map[string]string{"BATON_CASSANDRA_CLUSTER_NAME": "some other cluster"}})
	if inv.code != ExitFailure || !strings.Contains(inv.stderr.String(), `the lock lives on Cassandra cluster "some other cluster"`) ||
		!strings.Contains(inv.stderr.String(), "--cassandra-cluster-name (BATON_CASSANDRA_CLUSTER_NAME)") {
		t.Errorf("another cluster: exit %d, stderr %q", inv.code, inv.stderr.String())
	}
}

// TestDirectRunKillsTheChildsGroupByTheDeadline: CMD ignores SIGTERM and leaves a grandchild
// behind that ignores it too. When the grant is revoked, baton does not wait out --grace (10 s,
// longer than the lease): it kills CMD's whole process group at once when the lease reports the
// loss, before the lease's deadline and so before another owner could be granted the lock, and
// says when (issue 13; at once, as through a sidecar, since issue 22).
func TestDirectRunKillsTheChildsGroupByTheDeadline(t *testing.T) {
	lockID := fmt.Sprintf("cli-deadline-%d", time.Now().UnixNano())
	inv := start(t, &invocation{pid: 2101, args: directArgs(t, lockID, "--grace", "10s", "--",
		"sh", "-c", `trap "" TERM; sleep 300 & echo "$! $BATON_TOKEN"; wait`)})
	var grandchild int
	var tok int64
	testenv.WaitFor(t, "the run to hold the lock", time.Minute, func() bool {
		select {
		case <-inv.done:
			t.Fatalf("run exited %d: %s", inv.code, inv.stderr.String())
		default:
		}
		_, err := fmt.Sscanf(inv.stdout.String(), "%d %d", &grandchild, &tok)
		return err == nil && strings.HasSuffix(inv.stdout.String(), "\n")
	})

	revoked := revoke(t, lockID, tok)
	if code := inv.wait(t, 30*time.Second); code != ExitTempFail {
		t.Fatalf("exit %d, want 75; stderr: %s", code, inv.stderr.String())
	}
	took := time.Since(revoked)
	t.Logf("baton exited %v after the revocation; stderr: %s", took.Round(time.Millisecond), inv.stderr.String())
	if took > 5*time.Second {
		t.Errorf("CMD's group was stopped %v after the revocation: the lease (3s) bounds it, not --grace (10s)", took)
	}
	testenv.WaitFor(t, "the grandchild to be gone", 10*time.Second, func() bool { return !running(grandchild) })
	if !strings.Contains(inv.stderr.String(), "process group at once") {
		t.Errorf("stderr does not say the group was killed at once on the loss: %s", inv.stderr.String())
	}
	m := regexp.MustCompile(`SIGKILL at (\S+); the lease's deadline was (\S+)`).FindStringSubmatch(inv.stderr.String())
	if m == nil {
		t.Fatalf("stderr does not say when the group was killed and when the deadline was: %s", inv.stderr.String())
	}
	killedAt, err1 := time.Parse(time.RFC3339Nano, m[1])
	deadline, err2 := time.Parse(time.RFC3339Nano, m[2])
	if err1 != nil || err2 != nil || killedAt.After(deadline) || deadline.Before(revoked) {
		t.Errorf("killed at %s, deadline %s, revoked at %s (%v, %v)", m[1], m[2], stamp(revoked), err1, err2)
	}
}

// running says whether process pid exists and is not a zombie (dead, not yet reaped).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces and parentheses; the state follows the last ")".
	rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
	fields := strings.Fields(rest)
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// revoke revokes lockID's grant of tok as an operator does, and returns when.
func revoke(t *testing.T, lockID string, tok int64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := cassandrastore.New(ctx, single.Session(t), cassandrastore.WithKeyspace(testKeyspace))
	if err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if err := lock.Revoke(ctx, store, lockID, tok); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	return revoked
}
