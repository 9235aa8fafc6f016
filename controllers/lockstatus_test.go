package controllers

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/lock"
)

func TestLockStatuses(t *testing.T) {
	granted := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	dl := &batonv1.DistributedLock{Spec: batonv1.DistributedLockSpec{LockIDs: []string{"orders", "billing", "audit"}}}
	held := func(owner string, token int64, waiting int) lock.Status {
		return lock.Status{Exists: true, Record: lock.Record{Owner: owner, Token: token, Version: token * 3, GrantedAt: granted},
			Queue: make([]lock.QueueEntry, waiting)}
	}
	prev := []batonv1.LockStatus{
		{LockID: "orders", Holder: "a", HolderNamespace: "shop", Token: 4, Transitions: 2},
		{LockID: "audit", Holder: "x", HolderNamespace: "shop", Token: 9, Transitions: 5},
	}
	snaps := map[string]lock.Status{
		"orders":  held("shop/b/uid-b#1", 5, 2),                               // a → b
		"billing": {Exists: true, Record: lock.Record{Token: 7, Version: 20}}, // free, first seen
	}
	got := lockStatuses(dl, snaps, prev)
	if len(got) != 3 || got[0].LockID != "orders" || got[1].LockID != "billing" || got[2].LockID != "audit" {
		t.Fatalf("order or count: %+v", got)
	}
	o := got[0]
	if o.Holder != "b" || o.HolderNamespace != "shop" || o.Token != 5 || o.Waiting != 2 || o.Transitions != 3 ||
		o.AcquiredTime == nil || !o.AcquiredTime.Equal(&metav1.Time{Time: granted}) {
		t.Errorf("orders: %+v", o)
	}
	if b := got[1]; b.Holder != "" || b.Token != 7 || b.Transitions != 0 || b.AcquiredTime != nil {
		t.Errorf("billing (free): %+v", b)
	}
	if a := got[2]; a != prev[1] {
		t.Errorf("audit without a snapshot should keep its previous status: %+v", a)
	}

	changes := holderChanges(prev, got)
	if len(changes) != 1 || changes[0] != (holderChange{LockID: "orders", OldHolder: "shop/a", NewHolder: "shop/b", OldToken: 4, NewToken: 5}) {
		t.Fatalf("changes: %+v", changes)
	}
	// The same pod re-acquiring is a change (new token) but not a holder transition.
	again := lockStatuses(dl, map[string]lock.Status{"orders": held("shop/b/uid-b#2", 6, 0)}, got)
	if again[0].Transitions != 3 {
		t.Errorf("re-acquisition by the same pod counted as a transition: %+v", again[0])
	}
	if ch := holderChanges(got, again); len(ch) != 1 || ch[0].NewToken != 6 || ch[0].OldHolder != "shop/b" {
		t.Errorf("re-acquisition: %+v", ch)
	}
	if ch := holderChanges(again, again); len(ch) != 0 {
		t.Errorf("no change reported as %+v", ch)
	}
}

func TestLockStatusesRevoked(t *testing.T) {
	dl := &batonv1.DistributedLock{Spec: batonv1.DistributedLockSpec{LockIDs: []string{"orders"}}}
	rec := lock.Record{Owner: "shop/b/uid-b#1", Token: 5, Revoked: true}
	got := lockStatuses(dl, map[string]lock.Status{"orders": {Exists: true, Record: rec}}, nil)
	if !got[0].Revoked || got[0].Holder != "b" {
		t.Errorf("a revoked grant: %+v, want holder b marked revoked", got[0])
	}
	rec.Revoked = false
	if got := lockStatuses(dl, map[string]lock.Status{"orders": {Exists: true, Record: rec}}, got); got[0].Revoked {
		t.Errorf("a live grant marked revoked: %+v", got[0])
	}
}
