package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
)

// revokeEntry is one entry of the baton.dev/revoke annotation: a lock ID and, once bound, the
// fencing token of the one grant to revoke.
type revokeEntry struct {
	LockID string
	// Token is the grant to revoke; 0 for a bare entry that is not bound to a grant yet.
	Token int64
}

// String formats e as it appears in the annotation: "orders=12", or "orders" while unbound.
func (e revokeEntry) String() string {
	if e.Token == 0 {
		return e.LockID
	}
	return e.LockID + "=" + strconv.FormatInt(e.Token, 10)
}

// parseRevoke reads the value of the baton.dev/revoke annotation: comma-separated entries, each
// "<lockId>=<token>" or a bare "<lockId>", spaces around either part ignored. It returns the
// valid entries in order (repeats dropped) and a description of every invalid one. It does not
// check lock IDs against a DistributedLock.
func parseRevoke(value string) (entries []revokeEntry, invalid []string) {
	for _, raw := range strings.Split(value, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		id, tok, bound := strings.Cut(raw, "=")
		id = strings.TrimSpace(id)
		e := revokeEntry{LockID: id}
		if id == "" {
			invalid = append(invalid, fmt.Sprintf("entry %q names no lock ID: write <lockId>=<token> or <lockId>", raw))
			continue
		}
		if bound {
			tok = strings.TrimSpace(tok)
			t, err := strconv.ParseInt(tok, 10, 64)
			if err != nil || t < 1 {
				invalid = append(invalid, fmt.Sprintf("entry %q: token %q is not a positive whole number: write %s=<fencing token>, the token kubectl get dlock shows, or a bare %s for the current holder", raw, tok, id, id))
				continue
			}
			e.Token = t
		}
		if !slices.Contains(entries, e) {
			entries = append(entries, e)
		}
	}
	return entries, invalid
}

// formatRevoke is the annotation value of entries.
func formatRevoke(entries []revokeEntry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

// revocation is what one reconcile did with the baton.dev/revoke annotation.
type revocation struct {
	present bool          // the annotation was there
	value   string        // its value as read
	keep    []revokeEntry // what it should say afterwards: entries still to do, bare ones now bound
	failed  error         // store errors of revocations to retry
}

// next is the annotation value after this reconcile, and whether it changes.
func (rv revocation) next() (string, bool) {
	var keep []revokeEntry
	for _, e := range rv.keep {
		if !slices.Contains(keep, e) { // "orders,orders=12" binds to one entry
			keep = append(keep, e)
		}
	}
	v := formatRevoke(keep)
	return v, rv.present && v != rv.value
}

// revoke carries out the baton.dev/revoke annotation against the lock states in snapshots. It
// never revokes a bare entry: it binds it to the token of the grant it sees now, and that binding
// is written to the annotation (bindRevocations) before a later reconcile acts on it. A bound
// entry is revoked by exactly its token (lock.Revoke applies only while that token is the current
// grant), recorded in dl's status and dropped; one whose grant already ended is reported and
// dropped; one already recorded in status.locks[].lastRevocation (its removal from the annotation
// was delayed) is dropped without acting again. So a revocation can never reach the next holder,
// however long the annotation stays.
func (r *DistributedLockReconciler) revoke(ctx context.Context, dl *batonv1.DistributedLock, store lock.Store, snapshots map[string]lock.Status) revocation {
	var rv revocation
	rv.value, rv.present = dl.Annotations[batonv1.AnnotationRevoke]
	if !rv.present {
		return rv
	}
	log := logf.FromContext(ctx)
	warn := func(format string, args ...any) {
		r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, reasonRevokeFailed, "Revoke", format, args...)
	}
	entries, invalid := parseRevoke(rv.value)
	for _, msg := range invalid {
		warn("%s %s; nothing revoked for it", batonv1.AnnotationRevoke, msg)
	}
	for _, e := range entries {
		snap, declared := snapshots[e.LockID]
		if !declared {
			warn("%s names lock %q, which is not in spec.lockIds %v; nothing revoked for it", batonv1.AnnotationRevoke, e.LockID, dl.Spec.LockIDs)
			continue
		}
		rec := snap.Record
		if e.Token == 0 {
			if !rec.Held() {
				warn("lock %s is not held (last token %d); nothing revoked", e.LockID, rec.Token)
				continue
			}
			e.Token = rec.Token
			rv.keep = append(rv.keep, e)
			r.Recorder.Eventf(dl, nil, corev1.EventTypeNormal, reasonRevokeBound, "Revoke",
				"lock %s: %s bound to %s's grant (token %d); only that grant will be revoked", e.LockID, batonv1.AnnotationRevoke, holderName(rec.Owner), e.Token)
			continue
		}
		if last := lastRevocation(dl, e.LockID); last != nil && last.Token == e.Token {
			continue // done and recorded before; only the annotation's removal was late
		}
		err := lock.Revoke(ctx, store, sidecarcontract.StoreLockID(dl.Spec.Scope, dl.Namespace, e.LockID), e.Token)
		switch {
		case errors.Is(err, lock.ErrNotHolder):
			if e.Token > rec.Token {
				warn("lock %s: token %d was never granted (the lock is at token %d); nothing revoked: name the current holder's token", e.LockID, e.Token, rec.Token)
			} else {
				r.Recorder.Eventf(dl, nil, corev1.EventTypeNormal, ReasonRevokeGone, "Revoke",
					"lock %s: the grant with token %d already ended (the lock is at token %d%s); nothing revoked", e.LockID, e.Token, rec.Token, heldBy(rec))
			}
			log.Info("revocation target already gone", "lock", e.LockID, "token", e.Token, "current", rec.Token)
			continue
		case err != nil:
			rv.failed = errors.Join(rv.failed, fmt.Errorf("revoking lock %s token %d: %w", e.LockID, e.Token, err))
			rv.keep = append(rv.keep, e)
			continue
		}
		holder := ""
		if rec.Token == e.Token {
			holder = holderName(rec.Owner)
		}
		for i := range dl.Status.Locks {
			if dl.Status.Locks[i].LockID == e.LockID {
				dl.Status.Locks[i].LastRevocation = &batonv1.Revocation{Token: e.Token, Holder: holder, Time: metav1.NewTime(r.now())}
			}
		}
		r.Metrics.revoked(dl, e.LockID)
		r.Recorder.Eventf(dl, nil, corev1.EventTypeWarning, ReasonRevoked, "Revoke",
			"lock %s: revoked %s's grant (token %d); it stops claiming the lock at its next renewal, and the next waiter is granted one lease later", e.LockID, cmp.Or(holder, "the holder"), e.Token)
		log.Info("revoked", "lock", e.LockID, "holder", holder, "token", e.Token)
	}
	return rv
}

// bindRevocations writes what revoke decided back to the annotation: bare entries bound to their
// tokens, finished entries removed, entries to retry kept. The JSON patch is conditioned on the
// value read (test, then replace or remove), so a concurrent edit wins and is read afresh by the
// next reconcile. It reports whether a concurrent edit made the patch fail.
func (r *DistributedLockReconciler) bindRevocations(ctx context.Context, dl *batonv1.DistributedLock, rv revocation) (bool, error) {
	value, changed := rv.next()
	if !changed {
		return false, nil
	}
	path := "/metadata/annotations/" + jsonPointerEscape(batonv1.AnnotationRevoke)
	ops := []map[string]any{{"op": "test", "path": path, "value": rv.value}}
	if value == "" {
		ops = append(ops, map[string]any{"op": "remove", "path": path})
	} else {
		ops = append(ops, map[string]any{"op": "replace", "path": path, "value": value})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	err = r.Client.Patch(ctx, dl.DeepCopy(), client.RawPatch(types.JSONPatchType, patch))
	switch {
	case err == nil || apierrors.IsNotFound(err):
		return false, nil
	case apierrors.IsConflict(err) || apierrors.IsInvalid(err):
		// The test operation failed: the annotation changed since it was read.
		logf.FromContext(ctx).V(1).Info(batonv1.AnnotationRevoke+" changed meanwhile; reading it again", "err", err.Error())
		return true, nil
	default:
		return false, fmt.Errorf("updating annotation %s to %q: %w", batonv1.AnnotationRevoke, value, err)
	}
}

func lastRevocation(dl *batonv1.DistributedLock, lockID string) *batonv1.Revocation {
	for _, l := range dl.Status.Locks {
		if l.LockID == lockID {
			return l.LastRevocation
		}
	}
	return nil
}

// holderName is the holder pod of owner as "namespace/name", or the owner's identity when it is
// not a pod.
func holderName(owner string) string {
	ns, name := sidecarcontract.PodOfOwner(owner)
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func heldBy(rec lock.Record) string {
	if !rec.Held() {
		return ", free"
	}
	return ", held by " + holderName(rec.Owner)
}

func jsonPointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
