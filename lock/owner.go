package lock

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIDLength is the longest lock ID or owner identity accepted, in bytes.
const MaxIDLength = 256

// ownerSep separates identity and incarnation in an owner string.
const ownerSep = "#"

// Owner identifies one holder process. Identity is stable for the thing that holds the lock (in
// Kubernetes: namespace/pod name/pod UID); Incarnation is random per process start (NewOwner).
// With WithZeroWaitRestart, a new incarnation of the same identity that knows the same restart
// secret takes over its predecessor's grant at once, with a new token, because the predecessor
// process is gone (rule 7); the Locker then appends the secret's tag to the incarnation.
//
// Two Lockers must never share an Owner (identity and incarnation): a Locker takes over a grant of
// its own owner string at once. Use NewOwner. Where two live processes could share an identity
// and a restart secret, do not use WithZeroWaitRestart.
type Owner struct {
	Identity    string
	Incarnation string
}

// NewOwner returns an owner with the given identity and a fresh random incarnation.
func NewOwner(identity string) (Owner, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Owner{}, fmt.Errorf("lock: reading random incarnation: %w", err)
	}
	o := Owner{Identity: identity, Incarnation: hex.EncodeToString(b[:])}
	if err := o.Validate(); err != nil {
		return Owner{}, err
	}
	return o, nil
}

// ParseOwner parses an owner string written by Owner.String.
func ParseOwner(s string) (Owner, error) {
	i := strings.LastIndex(s, ownerSep)
	if i < 0 {
		return Owner{}, fmt.Errorf("lock: owner %q has no %q before its incarnation", s, ownerSep)
	}
	o := Owner{Identity: s[:i], Incarnation: s[i+1:]}
	return o, o.Validate()
}

// String returns the owner string stored in records and queue entries: "identity#incarnation".
func (o Owner) String() string { return o.Identity + ownerSep + o.Incarnation }

// Validate checks that the owner can be stored and parsed back.
func (o Owner) Validate() error {
	if err := checkText("owner identity", o.Identity); err != nil {
		return err
	}
	if strings.Contains(o.Identity, ownerSep) {
		return fmt.Errorf("lock: owner identity %q must not contain %q", o.Identity, ownerSep)
	}
	if o.Incarnation == "" || strings.Contains(o.Incarnation, ownerSep) || len(o.Incarnation) > 64 {
		return fmt.Errorf("lock: owner incarnation %q must be 1-64 bytes without %q", o.Incarnation, ownerSep)
	}
	if err := checkText("owner incarnation", o.Incarnation); err != nil {
		return err
	}
	return nil
}

// sameIdentity reports whether the owner string s belongs to an incarnation of o's identity.
func (o Owner) sameIdentity(s string) bool {
	i := strings.LastIndex(s, ownerSep)
	return i >= 0 && s[:i] == o.Identity
}

// restartTagSep separates an incarnation from the restart tag that WithZeroWaitRestart appends.
const restartTagSep = "~"

// restartTagLen is the length of a restart tag in hex digits (96 bits).
const restartTagLen = 24

// restartTag derives the tag that proves knowledge of secret for identity: a prefix of
// SHA-256 over a domain string, the identity and the secret.
func restartTag(identity string, secret []byte) string {
	h := sha256.New()
	h.Write([]byte("baton zero-wait restart\x00"))
	h.Write([]byte(identity))
	h.Write([]byte{0})
	h.Write(secret)
	return hex.EncodeToString(h.Sum(nil))[:restartTagLen]
}

// tagOf returns the restart tag carried by the incarnation of owner string s, "" when none.
func tagOf(s string) string {
	i := strings.LastIndex(s, ownerSep)
	if i < 0 {
		return ""
	}
	inc := s[i+1:]
	j := strings.LastIndex(inc, restartTagSep)
	if j < 0 {
		return ""
	}
	return inc[j+1:]
}

// ValidateLockID checks a lock ID: 1 to MaxIDLength bytes of printable UTF-8 without spaces.
func ValidateLockID(id string) error {
	if err := checkText("lock ID", id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidLockID, err)
	}
	return nil
}

func checkText(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > MaxIDLength:
		return fmt.Errorf("%s is %d bytes long, the limit is %d", what, len(s), MaxIDLength)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%s %q contains the non-printable or space character %U", what, s, r)
		}
	}
	return nil
}

// ownedByUs reports whether rec is a grant nobody but us can be claiming, so that we may take it
// over at once with a new token: an earlier lease of this very Locker that has ended (a live one
// would have made Acquire return ErrAlreadyHeld), or, with WithZeroWaitRestart, a grant of an earlier
// incarnation of our identity, which is dead (rule 7). A revoked grant never is: taking it
// over would undo the revocation.
func (a *acquisition) ownedByUs(rec Record) bool {
	l := a.l
	switch {
	case !rec.Held() || rec.Revoked:
		return false
	case rec.Owner == l.owner.String():
		return true
	default:
		return l.predecessor(rec.Owner)
	}
}

// predecessor reports whether owner string s is an earlier incarnation of this Locker's owner that
// proved to know the same restart secret (WithZeroWaitRestart): a process that is known to be dead,
// whose grant and queue entries we may take over at once (rule 7).
func (l *Locker) predecessor(s string) bool {
	m := l.opts.mutations
	switch {
	case s == l.owner.String() || !l.owner.sameIdentity(s):
		return false
	case m.has(mutZeroWaitAnyIdentity):
		return true
	case !l.opts.zeroWait:
		return false
	case m.has(mutZeroWaitWithoutProof):
		return true
	}
	return tagOf(s) == tagOf(l.owner.String())
}
