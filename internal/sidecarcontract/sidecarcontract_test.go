package sidecarcontract

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

func TestSettingsTable(t *testing.T) {
	flags, envs := map[string]bool{}, map[string]bool{}
	for _, s := range Settings() {
		if s.Env() == "" || s.Usage() == "" {
			t.Errorf("setting %q has no row in the table", s)
		}
		if flags[s.Flag()] || envs[s.Env()] {
			t.Errorf("setting %s is listed twice", s)
		}
		flags[s.Flag()], envs[s.Env()] = true, true
	}
	for _, s := range CassandraSettings() {
		if !flags[s.Flag()] || !strings.HasPrefix(s.Env(), "BATON_CASSANDRA_") {
			t.Errorf("Cassandra setting %s is not in the table or not a BATON_CASSANDRA_ variable", s)
		}
	}
	if got := Socket.String(); got != "--socket (BATON_SOCKET)" {
		t.Errorf("Socket.String() = %q", got)
	}
	if Socket.Env() != EnvSocket || Socket.Default() != SocketPath {
		t.Errorf("socket setting %s default %s, want %s", Socket, Socket.Default(), SocketPath)
	}
	if SocketDir != "/var/run/baton" { // the directory the docs and the app images name
		t.Errorf("socket directory %s, want /var/run/baton", SocketDir)
	}
	if d, err := time.ParseDuration(ShutdownTimeout.Default()); err != nil || d != DefaultShutdownTimeout || d > MaxShutdownTimeout {
		t.Errorf("shutdown default %q (%v), want %v", ShutdownTimeout.Default(), err, DefaultShutdownTimeout)
	}
}

func TestValuesFlagThenEnvThenDefault(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	env := map[string]string{"BATON_MODE": "Try", "BATON_LEASE": " 5s ", "BATON_CASSANDRA_HOSTS": "env-host"}
	v := Register(fs, func(k string) string { return env[k] }, Mode, Lease, CassandraHosts, Keyspace)
	if err := fs.Parse([]string{"--cassandra-hosts", " flag-host ", "--keyspace="}); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[Setting]string{
		CassandraHosts: "flag-host", // the flag wins, trimmed
		Mode:           "Try",       // from the environment
		Lease:          "5s",        // trimmed
		Keyspace:       "baton",     // an empty flag and no variable: the default
		LocalDC:        "",          // not registered, no variable, no default
	} {
		if got := v.Get(s); got != want {
			t.Errorf("Get(%s) = %q, want %q", s, got, want)
		}
	}
}

func TestWriteUsage(t *testing.T) {
	var b strings.Builder
	WriteUsage(&b, Settings()...)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(Settings()) {
		t.Fatalf("%d usage lines for %d settings:\n%s", len(lines), len(Settings()), b.String())
	}
	for i, s := range Settings() {
		f := strings.Fields(lines[i])
		if len(f) < 3 || f[0] != "--"+s.Flag() || f[1] != s.Env() {
			t.Errorf("line %q does not start with --%s %s", lines[i], s.Flag(), s.Env())
		}
		if d := s.Default(); d != "" && !strings.HasSuffix(lines[i], "(default "+d+")") {
			t.Errorf("line %q does not give the default %s", lines[i], d)
		}
	}
}

func TestSplitList(t *testing.T) {
	if got := SplitList(" a, ,b ,,c "); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("SplitList = %q", got)
	}
	if got := SplitList(" , "); got != nil {
		t.Errorf("SplitList of nothing = %q", got)
	}
}

func TestValidLockID(t *testing.T) {
	long := strings.Repeat("a", batonv1.MaxLockIDLength)
	for _, id := range []string{"a", "orders", "Orders.v2", "a_b-c.d", "0", long} {
		if !ValidLockID(id) {
			t.Errorf("ValidLockID(%q) = false, want true", id)
		}
	}
	for _, id := range []string{"", "-a", "a-", ".a", "a.", "_a", "a b", "a/b", "a#b", "ä", long + "a", "a\n"} {
		if ValidLockID(id) {
			t.Errorf("ValidLockID(%q) = true, want false", id)
		}
	}
}

func TestLockIDProblems(t *testing.T) {
	many := make([]string, batonv1.MaxLockIDs+1)
	for i := range many {
		many[i] = "l" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		ids  []string
		want []string
	}{
		{[]string{"orders", "payments"}, nil},
		{many[:batonv1.MaxLockIDs], nil},
		{nil, []string{"is empty: declare 1 to 16 lock IDs"}},
		{many, []string{"has 17 lock IDs: at most 16"}},
		{[]string{"ok", "-bad"}, []string{`has "-bad": a lock ID is 1 to 63 letters, digits, '.', '_' or '-', beginning and ending with a letter or digit`}},
		{[]string{"a", "b", "a"}, []string{`names "a" twice`}},
	} {
		if got := LockIDProblems(tc.ids); !slices.Equal(got, tc.want) {
			t.Errorf("LockIDProblems(%q) = %q, want %q", tc.ids, got, tc.want)
		}
	}
}

func TestConsistencies(t *testing.T) {
	for _, c := range []batonv1.Consistency{"QUORUM", "LOCAL_QUORUM", "EACH_QUORUM", "ALL"} {
		if !ValidConsistency(c) {
			t.Errorf("%s refused", c)
		}
	}
	for _, c := range []batonv1.Consistency{"", "ONE", "LOCAL_ONE", "quorum", "SERIAL"} {
		if ValidConsistency(c) {
			t.Errorf("%q accepted", c)
		}
	}
	if !ValidSerialConsistency("SERIAL") || !ValidSerialConsistency("LOCAL_SERIAL") || ValidSerialConsistency("QUORUM") {
		t.Error("serial consistencies: want SERIAL and LOCAL_SERIAL only")
	}
	if got := ConsistencyChoices(); got != "QUORUM, LOCAL_QUORUM, EACH_QUORUM or ALL" {
		t.Errorf("ConsistencyChoices() = %q", got)
	}
	if got := SerialConsistencyChoices(); got != "SERIAL or LOCAL_SERIAL" {
		t.Errorf("SerialConsistencyChoices() = %q", got)
	}
	if NeedsLocalDC("QUORUM", "SERIAL") || !NeedsLocalDC("LOCAL_QUORUM", "SERIAL") || !NeedsLocalDC("QUORUM", "LOCAL_SERIAL") {
		t.Error("NeedsLocalDC: want true exactly for a LOCAL_ level")
	}
}

func TestStoreLockID(t *testing.T) {
	if got := StoreLockID(batonv1.ScopeNamespace, "shop", "orders"); got != "shop/orders" {
		t.Errorf("namespaced key %q", got)
	}
	if got := StoreLockID(batonv1.ScopeGlobal, "shop", "orders"); got != "_global/orders" {
		t.Errorf("global key %q", got)
	}
	if got := StoreLockID("", "shop", "orders"); got != "shop/orders" {
		t.Errorf("unset scope (the CRD default, Namespace): key %q", got)
	}
}

func TestPodOfOwner(t *testing.T) {
	if got := OwnerIdentity("shop", "worker-0", "uid-1"); got != "shop/worker-0/uid-1" {
		t.Errorf("OwnerIdentity = %q", got)
	}
	for owner, want := range map[string][2]string{
		"shop/worker-0/uid-1#ab12":      {"shop", "worker-0"},
		"host/build-7/4242/9c1e2f3a#ff": {"", "host/build-7/4242/9c1e2f3a"},
		"lonely#1":                      {"", "lonely"},
		"no/incarnation/uid":            {"no", "incarnation"},
		"not an owner":                  {"", "not an owner"},
	} {
		ns, name := PodOfOwner(owner)
		if ns != want[0] || name != want[1] {
			t.Errorf("PodOfOwner(%q) = %q, %q; want %q", owner, ns, name, want)
		}
	}
}

// TestOneNamePerSetting: a setting's flag is its environment variable without BATON_, in lower
// case with dashes (BATON_CASSANDRA_LOCAL_DC: --cassandra-local-dc), as the operator's flags for
// the same settings are named; the names they had before stay as deprecated aliases.
func TestOneNamePerSetting(t *testing.T) {
	for _, s := range Settings() {
		if want := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.Env(), "BATON_")), "_", "-"); s.Flag() != want {
			t.Errorf("setting %s: flag --%s, want --%s after its variable", s, s.Flag(), want)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := Register(fs, func(string) string { return "" }, Settings()...)
	if err := fs.Parse([]string{"--locks=a,b", "--keyspace=ks", "--local-dc=eu", "--consistency=ALL", "--serial-consistency=LOCAL_SERIAL"}); err != nil {
		t.Fatalf("the old flag names: %v", err)
	}
	for s, want := range map[Setting]string{LockIDs: "a,b", Keyspace: "ks", LocalDC: "eu", Consistency: "ALL", SerialConsistency: "LOCAL_SERIAL"} {
		if got := v.Get(s); got != want {
			t.Errorf("Get(%s) after its old flag = %q, want %q", s, got, want)
		}
		if f := fs.Lookup(map[Setting]string{LockIDs: "locks", Keyspace: "keyspace", LocalDC: "local-dc", Consistency: "consistency", SerialConsistency: "serial-consistency"}[s]); f == nil ||
			!strings.Contains(f.Usage, "deprecated") || !strings.Contains(f.Usage, "--"+s.Flag()) {
			t.Errorf("old flag of %s: %+v; want its usage to say deprecated, use --%s", s, f, s.Flag())
		}
	}
}
