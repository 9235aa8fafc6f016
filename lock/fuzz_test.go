package lock_test

import (
	"testing"

	"github.com/baton-dev/baton/lock"
)

// FuzzParseOwner: an owner string either parses into an owner that prints back as the same string,
// or is rejected; it never panics. Owner strings come back from the store.
func FuzzParseOwner(f *testing.F) {
	for _, s := range []string{"ns/pod/uid#0a1b2c", "a#b#c", "#", "", "x#", "\xff#1", "a b#1", "a#1\n", "a#b c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := lock.ParseOwner(s)
		if err != nil {
			return
		}
		if o.String() != s {
			t.Fatalf("ParseOwner(%q) = %+v, prints back as %q", s, o, o.String())
		}
		if lock.ValidateLockID(o.Identity) != nil || lock.ValidateLockID(o.Incarnation) != nil {
			t.Fatalf("ParseOwner(%q) accepted identity %q or incarnation %q that is not valid text", s, o.Identity, o.Incarnation)
		}
	})
}

// FuzzValidateLockID: accepted lock IDs are non-empty, bounded and free of spaces and control
// characters.
func FuzzValidateLockID(f *testing.F) {
	for _, s := range []string{"orders", "ns/orders", "", " ", "\x00", "日本/ロック"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if lock.ValidateLockID(s) != nil {
			return
		}
		if s == "" || len(s) > lock.MaxIDLength {
			t.Fatalf("accepted %q (%d bytes)", s, len(s))
		}
		for _, r := range s {
			if r < 0x20 || r == ' ' || r == 0x7f {
				t.Fatalf("accepted %q with %U", s, r)
			}
		}
	})
}
