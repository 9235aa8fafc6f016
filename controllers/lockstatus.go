package controllers

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
)

// lockStatuses builds the status entry of every lock ID of dl, in spec order, from snapshots of
// the lock store (keyed by declared lock ID) and the previous status. A lock without a snapshot
// keeps its previous entry. Transitions counts changes of the holder pod seen by the operator.
// AcquiredTime is in whole seconds.
func lockStatuses(dl *batonv1.DistributedLock, snapshots map[string]lock.Status, prev []batonv1.LockStatus) []batonv1.LockStatus {
	before := make(map[string]batonv1.LockStatus, len(prev))
	for _, p := range prev {
		before[p.LockID] = p
	}
	out := make([]batonv1.LockStatus, 0, len(dl.Spec.LockIDs))
	for _, id := range dl.Spec.LockIDs {
		old, hadOld := before[id]
		snap, ok := snapshots[id]
		if !ok {
			if hadOld {
				out = append(out, old)
			} else {
				out = append(out, batonv1.LockStatus{LockID: id})
			}
			continue
		}
		st := batonv1.LockStatus{LockID: id, Token: snap.Record.Token, Waiting: int32(len(snap.Queue)),
			Transitions: old.Transitions, LastRevocation: old.LastRevocation}
		if snap.Record.Held() {
			st.Revoked = snap.Record.Revoked
			st.HolderNamespace, st.Holder = sidecarcontract.PodOfOwner(snap.Record.Owner)
			if !snap.Record.GrantedAt.IsZero() {
				// In whole seconds, as the API server keeps it: a finer time would differ from the
				// status read back, and each reconcile would send a status write that changes nothing.
				t := metav1.NewTime(snap.Record.GrantedAt).Rfc3339Copy()
				st.AcquiredTime = &t
			}
		}
		if hadOld && (old.Holder != st.Holder || old.HolderNamespace != st.HolderNamespace) && st.Holder != "" {
			st.Transitions++
		}
		if !hadOld && st.Holder != "" {
			st.Transitions = 1
		}
		out = append(out, st)
	}
	return out
}

// holderChange is a lock that was granted to another holder since the previous status.
type holderChange struct {
	LockID               string
	OldHolder, NewHolder string // namespace/name, or "" when the lock was free
	OldToken, NewToken   int64
}

// holderChanges lists the locks whose grant changed from prev to cur (for HolderChanged events).
// A new token for the same pod is a change too: the pod re-acquired the lock.
func holderChanges(prev, cur []batonv1.LockStatus) []holderChange {
	before := make(map[string]batonv1.LockStatus, len(prev))
	for _, p := range prev {
		before[p.LockID] = p
	}
	var out []holderChange
	for _, c := range cur {
		p := before[c.LockID]
		if c.Holder == "" || (c.Token == p.Token && c.Holder == p.Holder && c.HolderNamespace == p.HolderNamespace) {
			continue
		}
		out = append(out, holderChange{LockID: c.LockID, OldHolder: podName(p), NewHolder: podName(c), OldToken: p.Token, NewToken: c.Token})
	}
	return out
}

func podName(s batonv1.LockStatus) string {
	if s.Holder == "" {
		return ""
	}
	return s.HolderNamespace + "/" + s.Holder
}
