package hintudp

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/baton-dev/baton/lock"
)

// magic starts every hint datagram; the digit is the format's version.
const magic = "baton-hint/1"

// MaxDatagram is the largest hint datagram: the magic, the kind (no name is longer than "ahead"),
// three integers, a lock ID and an owner string of the longest lengths the lock accepts, separated
// by spaces.
const MaxDatagram = len(magic) + 1 + len("ahead") + 3*(1+20) + 1 + lock.MaxIDLength + 1 + lock.MaxIDLength + 1 + 64

// ErrMalformed is returned (wrapped) by ParseHint for a datagram that is not a hint.
var ErrMalformed = errors.New("hintudp: malformed hint")

// AppendHint appends h's datagram to b:
//
//	baton-hint/1 <kind> <enqueued> <token> <version> <lock ID> <owner>
//
// with the integers in decimal; kind is ahead, free, probe or echo. Lock IDs and owner strings
// never contain spaces (lock.ValidateLockID, lock.Owner.Validate). A probe and its echo name the
// prober's queue entry and carry no token or version (0). Releases before probes existed read a
// probe as malformed and drop it, and send no echo: their receivers' probers then poll.
func AppendHint(b []byte, h lock.Hint) []byte {
	b = append(b, magic...)
	b = append(b, ' ')
	b = append(b, h.Kind.String()...)
	b = append(b, ' ')
	for _, n := range []int64{h.Enqueued, h.Token, h.Version} {
		b = strconv.AppendInt(b, n, 10)
		b = append(b, ' ')
	}
	b = append(b, h.LockID...)
	b = append(b, ' ')
	return append(b, h.Owner...)
}

// ParseHint reads a datagram written by AppendHint. It accepts nothing else: another version, an
// unknown kind, a non-positive enqueue time, a negative token or version, a probe or echo with a
// token or version, an integer not in its shortest decimal form, an invalid lock ID or owner
// string, or any byte more.
func ParseHint(b []byte) (lock.Hint, error) {
	if len(b) > MaxDatagram {
		return lock.Hint{}, fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, len(b), MaxDatagram)
	}
	fields := bytes.Split(b, []byte{' '})
	if len(fields) != 7 || string(fields[0]) != magic {
		return lock.Hint{}, fmt.Errorf("%w: want %q and six fields separated by spaces", ErrMalformed, magic)
	}
	var h lock.Hint
	switch string(fields[1]) {
	case lock.HintAhead.String():
		h.Kind = lock.HintAhead
	case lock.HintFree.String():
		h.Kind = lock.HintFree
	case lock.HintProbe.String():
		h.Kind = lock.HintProbe
	case lock.HintEcho.String():
		h.Kind = lock.HintEcho
	default:
		return lock.Hint{}, fmt.Errorf("%w: unknown kind %q", ErrMalformed, fields[1])
	}
	for i, n := range []*int64{&h.Enqueued, &h.Token, &h.Version} {
		f := string(fields[2+i])
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != f {
			return lock.Hint{}, fmt.Errorf("%w: %q is not a non-negative decimal integer", ErrMalformed, f)
		}
		*n = v
	}
	if h.Enqueued == 0 {
		return lock.Hint{}, fmt.Errorf("%w: enqueue time 0", ErrMalformed)
	}
	if (h.Kind == lock.HintProbe || h.Kind == lock.HintEcho) && (h.Token != 0 || h.Version != 0) {
		return lock.Hint{}, fmt.Errorf("%w: a %s with a token or version", ErrMalformed, h.Kind)
	}
	h.LockID = string(fields[5])
	if err := lock.ValidateLockID(h.LockID); err != nil {
		return lock.Hint{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	h.Owner = string(fields[6])
	if _, err := lock.ParseOwner(h.Owner); err != nil {
		return lock.Hint{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return h, nil
}
