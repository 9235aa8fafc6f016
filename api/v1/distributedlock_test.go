package v1_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
	"github.com/google/go-cmp/cmp"
)

var crdDir = filepath.Join("..", "..", "config", "crd", "bases")

var kube = testenv.NewKubeWithCRDs(crdDir)

func TestMain(m *testing.M) {
	code := m.Run()
	kube.Stop()
	os.Exit(code)
}

// newClient returns a controller-runtime client for the test API server that knows the v1 types,
// and a fresh namespace to work in.
func newClient(t *testing.T) (client.Client, string) {
	t.Helper()
	c := kube.RuntimeClient(t, batonv1.AddToScheme)
	return c, testenv.Namespace(t, c, "dlock-")
}

func newLock(ns, name string, spec batonv1.DistributedLockSpec) *batonv1.DistributedLock {
	return &batonv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func TestDefaults(t *testing.T) {
	c, ns := newClient(t)
	ctx := context.Background()

	dl := newLock(ns, "minimal", batonv1.DistributedLockSpec{LockIDs: []string{"jobs"}})
	if err := c.Create(ctx, dl); err != nil {
		t.Fatalf("create minimal DistributedLock: %v", err)
	}
	got := &batonv1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	// mode and trafficPolicy stay unset: their defaults depend on each pod's workload kind
	// (inject.Defaults), and a value the API server filled in would look explicit.
	want := batonv1.DistributedLockSpec{
		LockIDs:       []string{"jobs"},
		LeaseDuration: &metav1.Duration{Duration: 15 * time.Second},
		Scope:         batonv1.ScopeNamespace,
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("defaulted spec (-want +got):\n%s", diff)
	}
	if got.Spec.LeaseDuration.Duration != lock.DefaultLease {
		t.Errorf("default lease %v, lock package default %v", got.Spec.LeaseDuration.Duration, lock.DefaultLease)
	}

	// Secret key names default inside the optional Cassandra override; the rest stays unset so
	// the operator's defaults apply.
	dl = newLock(ns, "with-secrets", batonv1.DistributedLockSpec{
		LockIDs: []string{"jobs"},
		Cassandra: &batonv1.CassandraConnection{
			CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "cassandra-creds"},
			TLSSecretRef:         &batonv1.TLSSecretRef{Name: "cassandra-tls"},
		},
	})
	if err := c.Create(ctx, dl); err != nil {
		t.Fatalf("create DistributedLock with secret refs: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	wantCass := &batonv1.CassandraConnection{
		CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "cassandra-creds", UsernameKey: "username", PasswordKey: "password"},
		TLSSecretRef:         &batonv1.TLSSecretRef{Name: "cassandra-tls", CAKey: "ca.crt", CertKey: "tls.crt", KeyKey: "tls.key"},
	}
	if diff := cmp.Diff(wantCass, got.Spec.Cassandra); diff != "" {
		t.Errorf("defaulted cassandra (-want +got):\n%s", diff)
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("lock-%d", i)
	}
	return out
}

func lease(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// TestValidation creates specs at and across every bound: the valid ones must be accepted, the
// invalid ones rejected as Invalid with a message that names the problem.
func TestValidation(t *testing.T) {
	c, ns := newClient(t)
	ctx := context.Background()
	base := func() batonv1.DistributedLockSpec { return batonv1.DistributedLockSpec{LockIDs: []string{"jobs"}} }

	tests := []struct {
		name    string
		mutate  func(*batonv1.DistributedLockSpec)
		wantErr string // "" means the spec is valid
	}{
		{"no lockIds", func(s *batonv1.DistributedLockSpec) { s.LockIDs = nil }, "spec.lockIds: Required value"},
		{"empty lockIds", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{} }, "should have at least 1 items"},
		{"17 lockIds", func(s *batonv1.DistributedLockSpec) { s.LockIDs = ids(17) }, "must have at most 16 items"},
		{"16 lockIds", func(s *batonv1.DistributedLockSpec) { s.LockIDs = ids(16) }, ""},
		{"duplicate ID", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{"a", "b", "a"} }, "lockIds must not repeat an ID"},
		{"bad ID characters", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{"orders/eu"} }, "should match '^[a-zA-Z0-9]([a-zA-Z0-9._-]{0,61}[a-zA-Z0-9])?$'"},
		{"ID ending in a dot", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{"orders."} }, "should match"},
		{"empty ID", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{""} }, "should be at least 1 chars long"},
		{"too long ID", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{strings.Repeat("a", 64)} }, "may not be more than 63"},
		{"63-char ID with dots", func(s *batonv1.DistributedLockSpec) { s.LockIDs = []string{"a." + strings.Repeat("b", 60) + "c"} }, ""},
		{"lease 500ms", func(s *batonv1.DistributedLockSpec) { s.LeaseDuration = lease(500 * time.Millisecond) }, "leaseDuration must be between 1s and 1h"},
		{"lease 2h", func(s *batonv1.DistributedLockSpec) { s.LeaseDuration = lease(2 * time.Hour) }, "leaseDuration must be between 1s and 1h"},
		{"yieldWhenUnready 500ms", func(s *batonv1.DistributedLockSpec) { s.YieldWhenUnready = lease(500 * time.Millisecond) }, "yieldWhenUnready must be between 1s and 1h"},
		{"yieldWhenUnready 2h", func(s *batonv1.DistributedLockSpec) { s.YieldWhenUnready = lease(2 * time.Hour) }, "yieldWhenUnready must be between 1s and 1h"},
		{"yieldWhenUnready 1s", func(s *batonv1.DistributedLockSpec) { s.YieldWhenUnready = lease(time.Second) }, ""},
		{"lease 1s", func(s *batonv1.DistributedLockSpec) { s.LeaseDuration = lease(time.Second) }, ""},
		{"lease 1h", func(s *batonv1.DistributedLockSpec) { s.LeaseDuration = lease(time.Hour) }, ""},
		{"bad mode", func(s *batonv1.DistributedLockSpec) { s.Mode = "Sometimes" }, `Unsupported value: "Sometimes": supported values: "Blocking", "Try"`},
		{"bad trafficPolicy", func(s *batonv1.DistributedLockSpec) { s.TrafficPolicy = "Service" }, `supported values: "ReadinessGate", "Label", "None"`},
		{"bad scope", func(s *batonv1.DistributedLockSpec) { s.Scope = "Cluster" }, `supported values: "Namespace", "Global"`},
		{"LOCAL_QUORUM without localDC", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{Consistency: batonv1.ConsistencyLocalQuorum}
		}, "consistency LOCAL_QUORUM needs cassandra.localDC"},
		{"LOCAL_SERIAL without localDC", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{SerialConsistency: batonv1.SerialConsistencyLocalSerial}
		}, "serialConsistency LOCAL_SERIAL needs cassandra.localDC"},
		{"LOCAL_QUORUM with localDC", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{
				Consistency: batonv1.ConsistencyLocalQuorum, SerialConsistency: batonv1.SerialConsistencyLocalSerial, LocalDC: "dc1",
			}
		}, ""},
		{"tlsServerName without tlsSecretRef", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{TLSServerName: "cassandra.db.svc"}
		}, "cassandra.tlsServerName needs cassandra.tlsSecretRef"},
		{"tlsServerName with tlsSecretRef", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{TLSServerName: "cassandra.db.svc", TLSSecretRef: &batonv1.TLSSecretRef{Name: "db"}}
		}, ""},
		{"bad consistency", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{Consistency: "ONE"}
		}, `Unsupported value: "ONE"`},
		{"bad keyspace", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{Keyspace: "1baton"}
		}, "should match '^[a-zA-Z][a-zA-Z0-9_]{0,47}$'"},
		{"full cassandra override", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{
				ContactPoints: []string{"cassandra-0.cassandra", "10.0.0.7:9142"}, Keyspace: "baton_eu",
				Consistency: batonv1.ConsistencyQuorum, SerialConsistency: batonv1.SerialConsistencySerial,
				CredentialsSecretRef: &batonv1.CredentialsSecretRef{Name: "creds", UsernameKey: "user", PasswordKey: "pass"},
				TLSSecretRef:         &batonv1.TLSSecretRef{Name: "tls", CAKey: "ca.pem"},
			}
		}, ""},
		{"secret ref without name", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = &batonv1.CassandraConnection{CredentialsSecretRef: &batonv1.CredentialsSecretRef{}}
		}, "spec.cassandra.credentialsSecretRef.name"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := base()
			tt.mutate(&spec)
			err := c.Create(ctx, newLock(ns, fmt.Sprintf("case-%d", i), spec))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("valid spec rejected: %v", err)
			case tt.wantErr == "":
				return
			case err == nil:
				t.Fatalf("invalid spec accepted, want an error containing %q", tt.wantErr)
			case !apierrors.IsInvalid(err):
				t.Fatalf("error is %v (reason %q), want Invalid", err, apierrors.ReasonForError(err))
			case !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q\ndoes not contain %q", err, tt.wantErr)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

func TestStatusSubresource(t *testing.T) {
	c, ns := newClient(t)
	ctx := context.Background()

	dl := newLock(ns, "orders", batonv1.DistributedLockSpec{LockIDs: []string{"orders", "billing"}})
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	acquired := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	status := batonv1.DistributedLockStatus{
		ObservedGeneration: dl.Generation,
		Locks: []batonv1.LockStatus{
			{LockID: "orders", Holder: "worker-7d9f-abcde", HolderNamespace: ns, Token: 42, AcquiredTime: &acquired, Waiting: 3, Transitions: 5},
			{LockID: "billing"},
		},
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batonv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "LocksRead", Message: "read 2 locks", ObservedGeneration: dl.Generation,
	})
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batonv1.ConditionStoreReachable, Status: metav1.ConditionTrue, Reason: "Connected", Message: "127.0.0.1:9042",
	})
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type: batonv1.ConditionRolloutSafe, Status: metav1.ConditionFalse, Reason: "MaxUnavailableTooSmall",
		Message: "Deployment worker: set maxUnavailable to at least 2",
	})
	for i := range status.Conditions { // the API server stores seconds
		status.Conditions[i].LastTransitionTime = metav1.NewTime(status.Conditions[i].LastTransitionTime.Truncate(time.Second))
	}
	dl.Status = status
	if err := c.Status().Update(ctx, dl); err != nil {
		t.Fatalf("status update: %v", err)
	}

	got := &batonv1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(status, got.Status); diff != "" {
		t.Errorf("status read back (-want +got):\n%s", diff)
	}
	if got.Generation != 1 {
		t.Errorf("generation %d after a status update, want 1", got.Generation)
	}

	// The main resource ignores status, and the status subresource ignores spec.
	got.Status.Locks[0].Token = 99
	got.Spec.Mode = batonv1.ModeTry
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Locks[0].Token != 42 || got.Spec.Mode != batonv1.ModeTry || got.Generation != 2 {
		t.Errorf("after a main-resource update: token %d (want 42), mode %s (want Try), generation %d (want 2)",
			got.Status.Locks[0].Token, got.Spec.Mode, got.Generation)
	}
	got.Spec.Mode = batonv1.ModeBlocking
	got.Status.ObservedGeneration = got.Generation
	if err := c.Status().Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Mode != batonv1.ModeTry || got.Status.ObservedGeneration != 2 {
		t.Errorf("after a status update: mode %s (want Try), observedGeneration %d (want 2)", got.Spec.Mode, got.Status.ObservedGeneration)
	}

	// Status is validated too: lock entries are keyed by lockId.
	got.Status.Locks = append(got.Status.Locks, batonv1.LockStatus{LockID: "orders"})
	if err := c.Status().Update(ctx, got); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Duplicate value") {
		t.Errorf("status with a repeated lockId: got %v, want Invalid with Duplicate value", err)
	}
}

// TestPrinterColumns checks the columns of the installed CRD, then asks the API server for the
// Table that `kubectl get distributedlocks` prints.
func TestPrinterColumns(t *testing.T) {
	c, ns := newClient(t)
	ctx := context.Background()

	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := c.Get(ctx, client.ObjectKey{Name: "distributedlocks.baton.dev"}, crd); err != nil {
		t.Fatalf("installed CRD: %v", err)
	}
	shortNames, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "shortNames")
	if !reflect.DeepEqual(shortNames, []string{"dlock"}) {
		t.Errorf("short names %v, want [dlock]", shortNames)
	}
	if scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope"); scope != "Namespaced" {
		t.Errorf("scope %q, want Namespaced", scope)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0].(map[string]any)
	if _, ok, _ := unstructured.NestedMap(v, "subresources", "status"); !ok {
		t.Error("no status subresource")
	}
	cols, _, _ := unstructured.NestedSlice(v, "additionalPrinterColumns")
	var defaultCols []string // the ones `kubectl get` shows without -o wide
	for _, col := range cols {
		m := col.(map[string]any)
		if p, _, _ := unstructured.NestedInt64(m, "priority"); p == 0 {
			defaultCols = append(defaultCols, fmt.Sprintf("%s=%s", m["name"], m["jsonPath"]))
		}
	}
	wantCols := []string{
		`Ready=.status.conditions[?(@.type=="Ready")].status`,
		"Locks=.status.lockIdsText",
		"Holder=.status.locks[0].holder",
		"Token=.status.locks[0].token",
		"Waiting=.status.locks[0].waiting",
		"Age=.metadata.creationTimestamp",
	}
	if !reflect.DeepEqual(defaultCols, wantCols) {
		t.Errorf("printer columns %v, want %v", defaultCols, wantCols)
	}

	// What kubectl shows: the server renders the table from those columns.
	dl := newLock(ns, "orders", batonv1.DistributedLockSpec{LockIDs: []string{"orders", "billing"}})
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	dl.Status.LockIDsText = "orders,billing" // as the operator writes it (controllers tests the operator)
	dl.Status.Locks = []batonv1.LockStatus{{LockID: "orders", Holder: "worker-0", Token: 7, AcquiredTime: &now, Waiting: 2}}
	dl.Status.Conditions = []metav1.Condition{{Type: batonv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "StatusCurrent", LastTransitionTime: now}}
	if err := c.Status().Update(ctx, dl); err != nil {
		t.Fatal(err)
	}
	table := kube.Table(ctx, t, "/apis/baton.dev/v1/namespaces/"+ns+"/distributedlocks")
	if want := []string{"NAME", "READY", "LOCKS", "HOLDER", "TOKEN", "WAITING", "AGE"}; !reflect.DeepEqual(table.Header, want) {
		t.Errorf("kubectl get columns %v, want %v", table.Header, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	row := table.Rows[0]
	t.Logf("kubectl get distributedlocks: %v", row)
	for col, want := range map[string]string{"NAME": "orders", "READY": "True", "LOCKS": "orders,billing", "HOLDER": "worker-0", "TOKEN": "7", "WAITING": "2"} {
		if row[col] != want {
			t.Errorf("column %s = %q, want %q", col, row[col], want)
		}
	}
}

// TestCRDAgreesWithConstants keeps the markers, the exported constants, the sidecar and the lock
// package on the same limits, reading the generated CRD file (no API server needed).
func TestCRDAgreesWithConstants(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(crdDir, "baton.dev_distributedlocks.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := utilyaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	spec, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties")
	ids := spec["lockIds"].(map[string]any)
	items := ids["items"].(map[string]any)
	lease := spec["leaseDuration"].(map[string]any)
	cassandra := spec["cassandra"].(map[string]any)["properties"].(map[string]any)

	check := func(what string, got, want any) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	check("lockIds maxItems", ids["maxItems"], batonv1.MaxLockIDs)
	check("lockIds items maxLength", items["maxLength"], batonv1.MaxLockIDLength)
	check("lockIds items pattern", items["pattern"], batonv1.LockIDPattern)
	status, _, _ := unstructured.NestedMap(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "status", "properties")
	check("lockIdsText maxLength (every ID at its longest, and the commas)", status["lockIdsText"].(map[string]any)["maxLength"],
		batonv1.MaxLockIDs*batonv1.MaxLockIDLength+batonv1.MaxLockIDs-1)
	check("cassandra keyspace pattern", cassandra["keyspace"].(map[string]any)["pattern"], batonv1.KeyspacePattern)
	check("the lock store's keyspace pattern", cassandrastore.KeyspacePattern, batonv1.KeyspacePattern)
	check("leaseDuration default", lease["default"], batonv1.DefaultLeaseDuration)
	for _, c := range []struct {
		name string
		s    string
		d    time.Duration
	}{
		{"default lease", batonv1.DefaultLeaseDuration, lock.DefaultLease},
		{"min lease", batonv1.MinLeaseDuration, lock.MinLease},
		{"max lease", batonv1.MaxLeaseDuration, lock.MaxLease},
	} {
		d, err := time.ParseDuration(c.s)
		if err != nil || d != c.d {
			t.Errorf("%s: api says %q, lock package %v", c.name, c.s, c.d)
		}
	}
	// The sidecar and the webhook accept exactly the consistency levels the CRD offers.
	for _, e := range cassandra["consistency"].(map[string]any)["enum"].([]any) {
		check("consistency "+fmt.Sprint(e)+" valid", sidecarcontract.ValidConsistency(batonv1.Consistency(fmt.Sprint(e))), true)
	}
	check("consistency choices", strings.ReplaceAll(fmt.Sprint(cassandra["consistency"].(map[string]any)["enum"]), " ", ", "),
		"["+strings.Replace(sidecarcontract.ConsistencyChoices(), " or ", ", ", 1)+"]")
	for _, e := range cassandra["serialConsistency"].(map[string]any)["enum"].([]any) {
		check("serial consistency "+fmt.Sprint(e)+" valid", sidecarcontract.ValidSerialConsistency(batonv1.SerialConsistency(fmt.Sprint(e))), true)
	}
	check("serial consistency choices", strings.ReplaceAll(fmt.Sprint(cassandra["serialConsistency"].(map[string]any)["enum"]), " ", ", "),
		"["+strings.Replace(sidecarcontract.SerialConsistencyChoices(), " or ", ", ", 1)+"]")
	rule := fmt.Sprint(lease["x-kubernetes-validations"])
	if !strings.Contains(rule, "duration('"+batonv1.MinLeaseDuration+"')") || !strings.Contains(rule, "duration('"+batonv1.MaxLeaseDuration+"')") {
		t.Errorf("leaseDuration rule %s does not use bounds %s and %s", rule, batonv1.MinLeaseDuration, batonv1.MaxLeaseDuration)
	}
	rule = fmt.Sprint(spec["yieldWhenUnready"].(map[string]any)["x-kubernetes-validations"])
	if !strings.Contains(rule, "duration('"+batonv1.MinYieldWhenUnready+"')") || !strings.Contains(rule, "duration('"+batonv1.MaxYieldWhenUnready+"')") {
		t.Errorf("yieldWhenUnready rule %s does not use bounds %s and %s", rule, batonv1.MinYieldWhenUnready, batonv1.MaxYieldWhenUnready)
	}
}

// TestLeaseNotADuration sends what the typed client cannot: a leaseDuration that does not parse.
func TestLeaseNotADuration(t *testing.T) {
	c, ns := newClient(t)
	for i, d := range []string{"soon", "15", "-5s", "1h-1m"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "baton.dev/v1", "kind": "DistributedLock",
			"metadata": map[string]any{"name": fmt.Sprintf("lease-%d", i), "namespace": ns},
			"spec":     map[string]any{"lockIds": []any{"jobs"}, "leaseDuration": d},
		}}
		err := c.Create(context.Background(), u)
		want := "leaseDuration must be a duration such as 15s, 1m30s or 1h"
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "between") {
			t.Errorf("leaseDuration %q: got %v, want only %q", d, err, want)
		}
	}
	// Go's spellings, as metav1.Duration writes them, are accepted.
	for i, d := range []string{"1m30s", "1.5s", "1500ms", "1h0m0s", "59m59.999s"} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "baton.dev/v1", "kind": "DistributedLock",
			"metadata": map[string]any{"name": fmt.Sprintf("ok-%d", i), "namespace": ns},
			"spec":     map[string]any{"lockIds": []any{"jobs"}, "leaseDuration": d},
		}}
		if err := c.Create(context.Background(), u); err != nil {
			t.Errorf("leaseDuration %q rejected: %v", d, err)
		}
	}
}

// TestKubectlGet runs the real kubectl (built from k8s.io/kubernetes at the API server's version,
// not whatever is on PATH) against the test API server. Under CI a kubectl that cannot be built
// fails the test.
func TestKubectlGet(t *testing.T) {
	kubectl := testenv.Kubectl(t)
	c, ns := newClient(t)
	ctx := context.Background()
	dl := newLock(ns, "orders", batonv1.DistributedLockSpec{LockIDs: []string{"orders", "billing"}})
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	dl.Status.LockIDsText = "orders,billing"
	dl.Status.Locks = []batonv1.LockStatus{{LockID: "orders", Holder: "worker-5d8c7-x2kqp", Token: 12, Waiting: 2}, {LockID: "billing"}}
	if err := c.Status().Update(ctx, dl); err != nil {
		t.Fatal(err)
	}

	path := testenv.WriteKubeconfig(t, kube.Config(t))
	for _, tc := range []struct {
		args   []string
		header string
	}{
		{[]string{"get", "distributedlocks"}, "NAME READY LOCKS HOLDER TOKEN WAITING AGE"},
		{[]string{"get", "dlock", "-o", "wide"}, "NAME READY LOCKS HOLDER TOKEN WAITING MODE TRAFFIC AGE"},
	} {
		args := tc.args
		out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", path, "--namespace", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("$ kubectl %s\n%s", strings.Join(args, " "), out)
		if header := strings.Join(strings.Fields(strings.SplitN(string(out), "\n", 2)[0]), " "); header != tc.header {
			t.Errorf("kubectl %s header %q, want %q", strings.Join(args, " "), header, tc.header)
		}
		if !strings.Contains(string(out), "worker-5d8c7-x2kqp") || !strings.Contains(string(out), " orders,billing ") {
			t.Errorf("kubectl output lacks the holder or the lock IDs")
		}
	}
}

// TestWhereALockLivesIsImmutable: scope, cassandra.keyspace and cassandra.serialConsistency choose
// the owner record (and the Paxos domain) of a lock, so the API server refuses to change them, or
// to set or unset them, on an existing DistributedLock; other fields, contact points included, may
// change. LOCAL_SERIAL is refused with scope Global.
func TestWhereALockLivesIsImmutable(t *testing.T) {
	c, ns := newClient(t)
	ctx := context.Background()
	cass := func(mutate func(*batonv1.CassandraConnection)) *batonv1.CassandraConnection {
		cc := &batonv1.CassandraConnection{LocalDC: "dc1"}
		mutate(cc)
		return cc
	}
	const recreate = "create a new DistributedLock instead"
	tests := []struct {
		name    string
		before  func(*batonv1.DistributedLockSpec)
		after   func(*batonv1.DistributedLockSpec)
		wantErr string // "" means the update is allowed
	}{
		{"scope Namespace to Global", func(*batonv1.DistributedLockSpec) {}, func(s *batonv1.DistributedLockSpec) { s.Scope = batonv1.ScopeGlobal },
			"spec.scope is immutable"},
		{"scope Global to Namespace", func(s *batonv1.DistributedLockSpec) { s.Scope = batonv1.ScopeGlobal },
			func(s *batonv1.DistributedLockSpec) { s.Scope = batonv1.ScopeNamespace }, "spec.scope is immutable"},
		{"scope Namespace written out", func(*batonv1.DistributedLockSpec) {}, func(s *batonv1.DistributedLockSpec) { s.Scope = batonv1.ScopeNamespace }, ""},
		{"keyspace changed", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = cass(func(c *batonv1.CassandraConnection) { c.Keyspace = "locks_a" })
		},
			func(s *batonv1.DistributedLockSpec) { s.Cassandra.Keyspace = "locks_b" }, "spec.cassandra.keyspace cannot be changed"},
		{"keyspace set", func(*batonv1.DistributedLockSpec) {},
			func(s *batonv1.DistributedLockSpec) { s.Cassandra = &batonv1.CassandraConnection{Keyspace: "locks_b"} }, "spec.cassandra.keyspace cannot be changed, set or unset"},
		{"keyspace set beside other fields", func(s *batonv1.DistributedLockSpec) { s.Cassandra = cass(func(*batonv1.CassandraConnection) {}) },
			func(s *batonv1.DistributedLockSpec) { s.Cassandra.Keyspace = "baton" }, "spec.cassandra.keyspace"},
		{"keyspace unset", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = cass(func(c *batonv1.CassandraConnection) { c.Keyspace = "locks_a" })
		},
			func(s *batonv1.DistributedLockSpec) { s.Cassandra.Keyspace = "" }, "spec.cassandra.keyspace"},
		{"cassandra override removed with its keyspace", func(s *batonv1.DistributedLockSpec) { s.Cassandra = &batonv1.CassandraConnection{Keyspace: "locks_a"} },
			func(s *batonv1.DistributedLockSpec) { s.Cassandra = nil }, "spec.cassandra.keyspace"},
		{"serialConsistency changed", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = cass(func(c *batonv1.CassandraConnection) { c.SerialConsistency = batonv1.SerialConsistencySerial })
		}, func(s *batonv1.DistributedLockSpec) {
			s.Cassandra.SerialConsistency = batonv1.SerialConsistencyLocalSerial
		}, "spec.cassandra.serialConsistency cannot be changed"},
		{"serialConsistency set", func(s *batonv1.DistributedLockSpec) { s.Cassandra = cass(func(*batonv1.CassandraConnection) {}) },
			func(s *batonv1.DistributedLockSpec) { s.Cassandra.SerialConsistency = batonv1.SerialConsistencySerial }, "spec.cassandra.serialConsistency"},
		{"serialConsistency unset", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = cass(func(c *batonv1.CassandraConnection) { c.SerialConsistency = batonv1.SerialConsistencyLocalSerial })
		}, func(s *batonv1.DistributedLockSpec) { s.Cassandra.SerialConsistency = "" }, "spec.cassandra.serialConsistency"},
		{"contact points replaced", func(s *batonv1.DistributedLockSpec) {
			s.Cassandra = cass(func(c *batonv1.CassandraConnection) { c.ContactPoints = []string{"cass-0"}; c.Keyspace = "locks_a" })
		}, func(s *batonv1.DistributedLockSpec) { s.Cassandra.ContactPoints = []string{"cass-3", "cass-4:9042"} }, ""},
		{"contact points added", func(*batonv1.DistributedLockSpec) {},
			func(s *batonv1.DistributedLockSpec) {
				s.Cassandra = &batonv1.CassandraConnection{ContactPoints: []string{"cass-0"}}
			}, ""},
		{"mode, lease and consistency changed", func(s *batonv1.DistributedLockSpec) { s.Cassandra = cass(func(*batonv1.CassandraConnection) {}) },
			func(s *batonv1.DistributedLockSpec) {
				s.Mode, s.LeaseDuration, s.Cassandra.Consistency = batonv1.ModeTry, lease(time.Minute), batonv1.ConsistencyLocalQuorum
			}, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := batonv1.DistributedLockSpec{LockIDs: []string{"jobs"}}
			tt.before(&spec)
			dl := newLock(ns, fmt.Sprintf("move-%d", i), spec)
			if err := c.Create(ctx, dl); err != nil {
				t.Fatalf("create: %v", err)
			}
			tt.after(&dl.Spec)
			err := c.Update(ctx, dl)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("allowed change rejected: %v", err)
			case tt.wantErr == "":
				return
			case err == nil:
				t.Fatalf("change accepted, want an error containing %q", tt.wantErr)
			case !apierrors.IsInvalid(err):
				t.Fatalf("error is %v (reason %q), want Invalid", err, apierrors.ReasonForError(err))
			case !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), recreate):
				t.Fatalf("error %q\ndoes not contain %q and %q", err, tt.wantErr, recreate)
			}
			t.Logf("rejected: %v", err)
		})
	}

	// LOCAL_SERIAL would make a Global lock exclusive only within one data center.
	global := batonv1.DistributedLockSpec{LockIDs: []string{"jobs"}, Scope: batonv1.ScopeGlobal,
		Cassandra: &batonv1.CassandraConnection{LocalDC: "dc1", SerialConsistency: batonv1.SerialConsistencyLocalSerial}}
	err := c.Create(ctx, newLock(ns, "global-local-serial", global))
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "serialConsistency LOCAL_SERIAL cannot be used with scope Global") {
		t.Errorf("Global with LOCAL_SERIAL: got %v, want Invalid naming the combination", err)
	}
	global.Cassandra.SerialConsistency = batonv1.SerialConsistencySerial
	if err := c.Create(ctx, newLock(ns, "global-serial", global)); err != nil {
		t.Errorf("Global with SERIAL rejected: %v", err)
	}
	namespaced := batonv1.DistributedLockSpec{LockIDs: []string{"jobs"},
		Cassandra: &batonv1.CassandraConnection{LocalDC: "dc1", SerialConsistency: batonv1.SerialConsistencyLocalSerial}}
	if err := c.Create(ctx, newLock(ns, "namespace-local-serial", namespaced)); err != nil {
		t.Errorf("Namespace with LOCAL_SERIAL rejected: %v", err)
	}
}

// TestClusterNameInStatus: the operator's record of the Cassandra cluster round-trips through the
// status subresource, and the main resource cannot write it.
func TestClusterNameInStatus(t *testing.T) {
	c, ns := newClient(t)
	ctx := context.Background()
	dl := newLock(ns, "orders", batonv1.DistributedLockSpec{LockIDs: []string{"orders"}})
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	dl.Status.CassandraClusterName = "Prod Cluster (eu-west)"
	if err := c.Status().Update(ctx, dl); err != nil {
		t.Fatal(err)
	}
	got := &batonv1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.CassandraClusterName != "Prod Cluster (eu-west)" {
		t.Fatalf("status.cassandraClusterName %q", got.Status.CassandraClusterName)
	}
	got.Status.CassandraClusterName = "elsewhere"
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.CassandraClusterName != "Prod Cluster (eu-west)" {
		t.Errorf("the main resource changed status.cassandraClusterName to %q", got.Status.CassandraClusterName)
	}
	got.Status.CassandraClusterName = strings.Repeat("c", 257)
	if err := c.Status().Update(ctx, got); !apierrors.IsInvalid(err) {
		t.Errorf("a 257-character cluster name: %v, want Invalid", err)
	}
}
