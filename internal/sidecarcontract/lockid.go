package sidecarcontract

import (
	"fmt"
	"regexp"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// lockIDPattern is batonv1.LockIDPattern compiled: a declared lock ID becomes part of a store key
// and of a pod condition's message.
var lockIDPattern = regexp.MustCompile(batonv1.LockIDPattern)

// keyspacePattern is batonv1.KeyspacePattern compiled: a keyspace name is written into CQL
// statements unquoted.
var keyspacePattern = regexp.MustCompile(batonv1.KeyspacePattern)

// ValidKeyspace reports whether ks may name a lock keyspace: a letter, then up to 47 letters,
// digits or '_'. It does not say whether the keyspace exists.
func ValidKeyspace(ks string) bool { return keyspacePattern.MatchString(ks) }

// ValidLockID reports whether id may be declared as a lock ID: 1 to batonv1.MaxLockIDLength
// letters, digits, '.', '_' or '-', beginning and ending with a letter or digit.
func ValidLockID(id string) bool { return lockIDPattern.MatchString(id) }

// LockIDProblems returns what is wrong with the lock IDs one pod declares: none, more than
// batonv1.MaxLockIDs, an invalid or a repeated ID. Each problem reads on from the name of the
// setting, e.g. `has "-x": a lock ID is ...` after "spec.lockIds ".
func LockIDProblems(ids []string) []string {
	var out []string
	switch n := len(ids); {
	case n == 0:
		out = append(out, fmt.Sprintf("is empty: declare 1 to %d lock IDs", batonv1.MaxLockIDs))
	case n > batonv1.MaxLockIDs:
		out = append(out, fmt.Sprintf("has %d lock IDs: at most %d", n, batonv1.MaxLockIDs))
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !ValidLockID(id) {
			out = append(out, fmt.Sprintf("has %q: a lock ID is 1 to %d letters, digits, '.', '_' or '-', beginning and ending with a letter or digit",
				id, batonv1.MaxLockIDLength))
		}
		if seen[id] {
			out = append(out, fmt.Sprintf("names %q twice", id))
		}
		seen[id] = true
	}
	return out
}
