package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/controllers"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/testing/testenv"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/memstore"
)

func TestParseRevoke(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string // FormatRevoke of the valid entries
		invalid []string
	}{
		{"orders", "orders", nil},
		{"orders=12", "orders=12", nil},
		{" orders = 12 , billing ", "orders=12,billing", nil},
		{"orders=12,billing=7", "orders=12,billing=7", nil},
		{"orders,orders", "orders", nil},
		{"orders=12,orders=12,orders=13", "orders=12,orders=13", nil},
		{",,orders,,", "orders", nil},
		{"", "", nil},
		{"orders=abc", "", []string{`entry "orders=abc": token "abc" is not a positive whole number`}},
		{"orders=0,billing=-3", "", []string{`token "0"`, `token "-3"`}},
		{"orders=", "", []string{`token ""`}},
		{"=12,billing", "billing", []string{`entry "=12" names no lock ID`}},
		{"orders=99999999999999999999", "", []string{"not a positive whole number"}},
	} {
		entries, invalid := controllers.ParseRevoke(tc.in)
		if got := controllers.FormatRevoke(entries); got != tc.want {
			t.Errorf("ParseRevoke(%q) valid entries %q, want %q", tc.in, got, tc.want)
		}
		if len(invalid) != len(tc.invalid) {
			t.Errorf("ParseRevoke(%q) invalid %q, want %d", tc.in, invalid, len(tc.invalid))
			continue
		}
		for i, want := range tc.invalid {
			if !strings.Contains(invalid[i], want) {
				t.Errorf("ParseRevoke(%q) invalid[%d] = %q, want it to contain %q", tc.in, i, invalid[i], want)
			}
		}
	}
}

// events records the reconciler's Events.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) Eventf(_ runtime.Object, _ runtime.Object, eventtype, reason, _ string, note string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, eventtype+" "+reason+" "+fmt.Sprintf(note, args...))
}

func (e *events) find(reason, note string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.list {
		if strings.Contains(s, " "+reason+" ") && strings.Contains(s, note) {
			return true
		}
	}
	return false
}

// String lists the last events, for failure messages.
func (e *events) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.list[max(0, len(e.list)-20):], "\n")
}

// source hands the reconciler one lock store.
type source struct{ store lock.Store }

func (s source) Store(context.Context, *batonv1.DistributedLock) (lock.Store, error) {
	return s.store, nil
}

// failingRevocations is a lock store on which revoking one lock always fails, as a store error
// (the linearizable read and the conditional write that Revoke needs); reading it still works.
type failingRevocations struct {
	lock.Store
	lockID string
}

var errInjected = errors.New("injected store failure")

func (f failingRevocations) Load(ctx context.Context, lockID string, linearizable bool) (lock.Record, bool, error) {
	if linearizable && lockID == f.lockID {
		return lock.Record{}, false, errInjected
	}
	return f.Store.Load(ctx, lockID, linearizable)
}

func (f failingRevocations) CompareAndSwap(ctx context.Context, lockID string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	if lockID == f.lockID {
		return false, lock.Record{}, false, errInjected
	}
	return f.Store.CompareAndSwap(ctx, lockID, prev, next)
}

// failingRemoval is a client whose patches of the baton.dev/revoke annotation fail whenever they
// would remove it or drop an entry from it: the annotation's removal is delayed indefinitely.
type failingRemoval struct {
	client.Client
	failed atomic.Int32
}

func (c *failingRemoval) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*batonv1.DistributedLock); ok && patch.Type() == types.JSONPatchType {
		data, err := patch.Data(obj)
		if err != nil {
			return err
		}
		var ops []struct {
			Op    string `json:"op"`
			Value string `json:"value"`
		}
		if err := json.Unmarshal(data, &ops); err != nil {
			return err
		}
		was := -1
		for _, op := range ops {
			n := len(strings.Split(op.Value, ","))
			switch {
			case op.Op == "test":
				was = n
			case op.Op == "remove", op.Op == "replace" && n < was:
				c.failed.Add(1)
				return apierrors.NewServiceUnavailable("injected: removing the revoke annotation fails")
			}
		}
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func newClient(t *testing.T) (client.Client, string) {
	t.Helper()
	c := kube.RuntimeClient(t, batonv1.AddToScheme)
	return c, testenv.Namespace(t, c, "revoke-")
}

const testLease = 2 * time.Second

func newLocker(t *testing.T, store lock.Store, owner string) *lock.Locker {
	t.Helper()
	o, err := lock.NewOwner(owner)
	if err != nil {
		t.Fatal(err)
	}
	l, err := lock.New(store, o, lock.WithLease(testLease), lock.WithPollInterval(50*time.Millisecond),
		lock.WithWaiterPollInterval(200*time.Millisecond), lock.WithQueueEntryTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRevocationNeverHitsTheNextHolder: a revocation whose annotation stays on the
// DistributedLock for longer than a lease (another lock ID of it keeps failing, or removing it
// keeps failing) revokes the grant it was meant for and never the next, healthy holder's.
func TestRevocationNeverHitsTheNextHolder(t *testing.T) {
	for _, tc := range []struct {
		name       string
		annotation string
		client     func(client.Client) client.Client
		store      func(lock.Store, string) lock.Store
	}{
		{
			name:       "another lock ID of the annotation keeps failing",
			annotation: "orders,billing",
			client:     func(c client.Client) client.Client { return c },
			store:      func(s lock.Store, billing string) lock.Store { return failingRevocations{Store: s, lockID: billing} },
		},
		{
			name:       "removing the annotation keeps failing",
			annotation: "orders",
			client:     func(c client.Client) client.Client { return &failingRemoval{Client: c} },
			store:      func(s lock.Store, _ string) lock.Store { return s },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ns := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dl := &batonv1.DistributedLock{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"},
				Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders", "billing"}, LeaseDuration: &metav1.Duration{Duration: testLease}},
			}
			if err := c.Create(ctx, dl); err != nil {
				t.Fatal(err)
			}
			orders := sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, "orders")
			billing := sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, "billing")

			// Pod a holds both locks; pod b waits for orders and is its next, healthy holder.
			mem := memstore.New()
			a := newLocker(t, mem.Client(1, memstore.Faults{}), ns+"/pod-a/uid-a")
			first, err := a.Acquire(ctx, orders)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.Acquire(ctx, billing); err != nil {
				t.Fatal(err)
			}
			b := newLocker(t, mem.Client(2, memstore.Faults{}), ns+"/pod-b/uid-b")
			granted := make(chan *lock.Lease, 1)
			go func() {
				l, err := b.Acquire(ctx, orders)
				if err != nil {
					t.Errorf("b: %v", err)
				}
				granted <- l
			}()
			testenv.WaitFor(t, "b to queue for orders", 10*time.Second, func() bool {
				st, err := lock.Inspect(ctx, mem.Client(3, memstore.Faults{}), orders)
				return err == nil && len(st.Queue) == 1
			})

			rec := &events{}
			r := &controllers.DistributedLockReconciler{
				Client: tc.client(c), Recorder: rec, Interval: time.Hour,
				Stores: source{tc.store(mem.Client(4, memstore.Faults{}), billing)},
			}
			reconcile := func() {
				// The errors are the injected failures; the controller would retry them.
				_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)})
			}
			reconcile() // status first, as after the lock was created
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, batonv1.AnnotationRevoke, tc.annotation)
			if err := c.Patch(ctx, dl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				t.Fatal(err)
			}

			// Reconcile as the controller would, again and again, until b holds the lock and for
			// two leases more.
			var next *lock.Lease
			deadline := time.Time{}
			for deadline.IsZero() || time.Now().Before(deadline) {
				reconcile()
				select {
				case next = <-granted:
					if next == nil {
						t.FailNow()
					}
					deadline = time.Now().Add(2 * testLease)
				default:
				}
				if ctx.Err() != nil {
					t.Fatalf("b was never granted orders; events:\n%s", rec)
				}
				time.Sleep(50 * time.Millisecond)
			}

			// The grant the annotation meant was revoked and recorded...
			if !errors.Is(first.Err(), lock.ErrRevoked) {
				t.Errorf("a's grant (token %d) ended with %v, want ErrRevoked", first.Token(), first.Err())
			}
			got := &batonv1.DistributedLock{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
				t.Fatal(err)
			}
			if l := got.Status.Locks[0]; l.LastRevocation == nil || l.LastRevocation.Token != first.Token() {
				t.Errorf("status of orders %+v, want the revocation of token %d recorded", l, first.Token())
			}
			// ...while the annotation stayed...
			if _, still := got.Annotations[batonv1.AnnotationRevoke]; !still {
				t.Errorf("the annotation was removed; this test needs its removal delayed")
			}
			// ...and the next holder was never revoked.
			if next.Token() <= first.Token() {
				t.Errorf("b's token %d is not after a's %d", next.Token(), first.Token())
			}
			select {
			case <-next.Done():
				t.Errorf("b's healthy grant (token %d) ended: %v", next.Token(), next.Err())
			default:
			}
			for _, e := range mem.History() {
				if e.LockID == orders && e.Next.Revoked && e.Next.Token != first.Token() {
					t.Errorf("token %d of orders was revoked; only token %d was meant", e.Next.Token, first.Token())
				}
			}
			if t.Failed() {
				t.Logf("annotation %q; events:\n%s", got.Annotations[batonv1.AnnotationRevoke], rec)
			}
			_ = next.Release(context.Background())
		})
	}
}

// TestRevokeAnnotationForms: a bound entry revokes exactly its token, a stale one is reported as
// gone, a bare one is bound to the current token and written back before anything is revoked, and
// invalid entries are reported; the annotation is removed once every entry is dealt with.
func TestRevokeAnnotationForms(t *testing.T) {
	c, ns := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "work"},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders"}, LeaseDuration: &metav1.Duration{Duration: testLease}},
	}
	if err := c.Create(ctx, dl); err != nil {
		t.Fatal(err)
	}
	orders := sidecarcontract.StoreLockID(batonv1.ScopeNamespace, ns, "orders")
	mem := memstore.New()
	rec := &events{}
	r := &controllers.DistributedLockReconciler{Client: c, Recorder: rec, Interval: time.Hour, Stores: source{mem.Client(9, memstore.Faults{})}}
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dl)}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	annotate := func(v string) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, batonv1.AnnotationRevoke, v)
		if err := c.Patch(ctx, dl, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	annotation := func() (string, bool) {
		t.Helper()
		got := &batonv1.DistributedLock{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
			t.Fatal(err)
		}
		v, ok := got.Annotations[batonv1.AnnotationRevoke]
		return v, ok
	}

	a, err := newLocker(t, mem.Client(1, memstore.Faults{}), ns+"/pod-a/uid-a").Acquire(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := newLocker(t, mem.Client(2, memstore.Faults{}), ns+"/pod-b/uid-b").Acquire(ctx, orders)
	if err != nil {
		t.Fatal(err)
	}
	reconcile()

	// a's grant ended; b holds the lock with a later token. Naming a's token revokes nothing.
	annotate(fmt.Sprintf("orders=%d, orders=%d ,ledger,orders=soon", a.Token(), b.Token()+7))
	reconcile()
	for _, want := range []struct{ reason, note string }{
		{controllers.ReasonRevokeGone, fmt.Sprintf("the grant with token %d already ended (the lock is at token %d, held by %s/pod-b)", a.Token(), b.Token(), ns)},
		{controllers.ReasonRevokeFailed, fmt.Sprintf("token %d was never granted (the lock is at token %d)", b.Token()+7, b.Token())},
		{controllers.ReasonRevokeFailed, `names lock "ledger", which is not in spec.lockIds`},
		{controllers.ReasonRevokeFailed, `entry "orders=soon": token "soon" is not a positive whole number`},
	} {
		if !rec.find(want.reason, want.note) {
			t.Errorf("no %s event saying %q; events:\n%s", want.reason, want.note, rec)
		}
	}
	if v, ok := annotation(); ok {
		t.Errorf("annotation %q left after every entry was dealt with", v)
	}
	if !b.Valid() {
		t.Fatalf("b's grant ended: %v", b.Err())
	}

	// A bare lock ID is bound to b's token and written back; nothing is revoked yet.
	annotate("orders")
	reconcile()
	if v, _ := annotation(); v != fmt.Sprintf("orders=%d", b.Token()) {
		t.Fatalf("annotation %q after the first reconcile, want it bound to orders=%d", v, b.Token())
	}
	if cur, _ := mem.Record(orders); rec.find(controllers.ReasonRevoked, "") || cur.Revoked {
		t.Fatal("revoked before the binding was recorded in the annotation")
	}
	if !rec.find(controllers.ReasonRevokeBound, fmt.Sprintf("bound to %s/pod-b's grant (token %d)", ns, b.Token())) {
		t.Errorf("no RevokeBound event; events:\n%s", rec)
	}
	// The next reconcile acts on the bound entry, records it and removes the annotation.
	reconcile()
	got := &batonv1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dl), got); err != nil {
		t.Fatal(err)
	}
	if l := got.Status.Locks[0]; l.LastRevocation == nil || l.LastRevocation.Token != b.Token() || l.LastRevocation.Holder != ns+"/pod-b" {
		t.Errorf("status %+v, want b's revocation recorded", l)
	}
	if v, ok := got.Annotations[batonv1.AnnotationRevoke]; ok {
		t.Errorf("annotation %q left after the revocation", v)
	}
	if !rec.find(controllers.ReasonRevoked, fmt.Sprintf("revoked %s/pod-b's grant (token %d)", ns, b.Token())) {
		t.Errorf("no Revoked event; events:\n%s", rec)
	}
	select {
	case <-b.Done():
		if !errors.Is(b.Err(), lock.ErrRevoked) {
			t.Errorf("b lost its grant with %v, want ErrRevoked", b.Err())
		}
	case <-time.After(2 * testLease):
		t.Error("b did not notice the revocation within two leases")
	}
}
