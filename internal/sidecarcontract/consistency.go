package sidecarcontract

import (
	"slices"
	"strings"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

// consistencies are the levels a lock may read and commit with: weaker ones (ONE, LOCAL_ONE, ...)
// cannot keep lock reads in line with lightweight-transaction writes. The CRD's enum on
// spec.cassandra.consistency lists the same (a test checks).
var consistencies = []batonv1.Consistency{
	batonv1.ConsistencyQuorum, batonv1.ConsistencyLocalQuorum, batonv1.ConsistencyEachQuorum, batonv1.ConsistencyAll,
}

// serialConsistencies are the levels of the Paxos phase of lightweight transactions.
var serialConsistencies = []batonv1.SerialConsistency{
	batonv1.SerialConsistencySerial, batonv1.SerialConsistencyLocalSerial,
}

// ValidConsistency reports whether a lock may use consistency level c (upper case).
func ValidConsistency(c batonv1.Consistency) bool { return slices.Contains(consistencies, c) }

// ValidSerialConsistency reports whether a lock may use serial consistency level s (upper case).
func ValidSerialConsistency(s batonv1.SerialConsistency) bool {
	return slices.Contains(serialConsistencies, s)
}

// ConsistencyChoices lists the valid consistency levels for messages: "QUORUM, LOCAL_QUORUM,
// EACH_QUORUM or ALL".
func ConsistencyChoices() string { return choices(consistencies) }

// SerialConsistencyChoices lists the valid serial consistency levels for messages: "SERIAL or
// LOCAL_SERIAL".
func SerialConsistencyChoices() string { return choices(serialConsistencies) }

// NeedsLocalDC reports whether consistency c or serial consistency s is local to one data centre,
// so that the connection must name it.
func NeedsLocalDC(c batonv1.Consistency, s batonv1.SerialConsistency) bool {
	return strings.HasPrefix(string(c), "LOCAL_") || strings.HasPrefix(string(s), "LOCAL_")
}

func choices[T ~string](list []T) string {
	names := make([]string, len(list))
	for i, v := range list {
		names[i] = string(v)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
