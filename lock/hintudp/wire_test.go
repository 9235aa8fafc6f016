package hintudp

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-dev/baton/lock"
)

func TestWireRoundTrip(t *testing.T) {
	for _, h := range []lock.Hint{
		{LockID: "orders", Owner: "shop/orders-7d9f#1a2b", Enqueued: 1732550000000000, Kind: lock.HintFree, Token: 1732549000000007, Version: 12},
		{LockID: strings.Repeat("x", lock.MaxIDLength), Owner: strings.Repeat("y", lock.MaxIDLength) + "#" + strings.Repeat("z", 64), Enqueued: 1, Kind: lock.HintAhead},
		{LockID: strings.Repeat("x", lock.MaxIDLength), Owner: strings.Repeat("y", lock.MaxIDLength) + "#" + strings.Repeat("z", 64), Enqueued: 1<<63 - 1, Kind: lock.HintProbe},
		{LockID: "orders", Owner: "shop/orders-7d9f#1a2b", Enqueued: 1732550000000000, Kind: lock.HintEcho},
	} {
		b := AppendHint(nil, h)
		if len(b) > MaxDatagram {
			t.Fatalf("datagram of %d bytes, MaxDatagram %d", len(b), MaxDatagram)
		}
		got, err := ParseHint(b)
		if err != nil || got != h {
			t.Fatalf("ParseHint(%q) = %+v, %v; want %+v", b, got, err, h)
		}
	}
}

func TestWireRejects(t *testing.T) {
	for _, d := range []string{
		"",
		"baton-hint/1 free 1 0 0 orders", // a field short
		"baton-hint/1 free 1 0 0 orders a#1 more",                      // a field more
		"baton-hint/2 free 1 orders a#1",                               // another version
		"baton-hint/1 gone 1 0 0 orders a#1",                           // unknown kind
		"baton-hint/1 free 0 0 0 orders a#1",                           // enqueue time not positive
		"baton-hint/1 free -5 0 0 orders a#1",                          //
		"baton-hint/1 free 1x 0 0 orders a#1",                          //
		"baton-hint/1 free 1 0 0  a#1",                                 // empty lock ID
		"baton-hint/1 free 1 0 0 orders nohash",                        // owner without incarnation
		"baton-hint/1 free 1 0 0 orders\x00 a#1",                       // non-printable lock ID
		"baton-hint/1 free 1 0 0 orders a#1\n",                         //
		"baton-hint/1 free 1 0 0 " + strings.Repeat("x", 700) + " a#1", // too long
		"baton-hint/1 free 1 -1 0 orders a#1",                          // negative token
		"baton-hint/1 free 1 0 +3 orders a#1",                          // not the shortest form
		"baton-hint/1 free 1 007 0 orders a#1",                         //
		"baton-hint/1 probe 1 7 0 orders a#1",                          // a probe with a token
		"baton-hint/1 echo 1 0 9 orders a#1",                           // an echo with a version
		"baton-hint/1 Probe 1 0 0 orders a#1",                          // kinds are lower case
	} {
		if h, err := ParseHint([]byte(d)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseHint(%q) = %+v, %v; want ErrMalformed", d, h, err)
		}
	}
}

// FuzzParseHint: whatever arrives on the hint port, ParseHint never panics, and every hint it
// accepts is written back byte for byte.
func FuzzParseHint(f *testing.F) {
	f.Add([]byte("baton-hint/1 free 1732550000000000 1732549000000007 12 orders shop/orders-7d9f#1a2b"))
	f.Add([]byte("baton-hint/1 ahead 1 0 0 a b#c"))
	f.Add([]byte("baton-hint/1 free 1 0 0 a b#c#d"))
	f.Add([]byte("baton-hint/1 probe 1732550000000000 0 0 orders shop/orders-7d9f#1a2b"))
	f.Add([]byte("baton-hint/1 echo 1 0 0 a b#c"))
	f.Add([]byte("baton-hint/1 probe 1 0 1 a b#c"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHint(b)
		if err != nil {
			return
		}
		if again := AppendHint(nil, h); string(again) != string(b) {
			t.Fatalf("ParseHint(%q) = %+v, written back as %q", b, h, again)
		}
	})
}
