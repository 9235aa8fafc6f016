package fencedstore

import (
	"errors"
	"time"
)

// ErrRejected is returned by Client.Write for a write whose token is lower than the highest the
// store has seen for the resource: the writer's lock has passed to someone else.
var ErrRejected = errors.New("fencedstore: write rejected: a higher fencing token has written since")

// Write is one write to a resource.
type Write struct {
	// Token is the writer's fencing token; it must be positive.
	Token int64 `json:"token"`
	// Writer names who writes, e.g. the pod name.
	Writer string `json:"writer"`
	// Data is what is written; the store keeps it in the history.
	Data string `json:"data,omitempty"`
}

// Result is the store's answer to a Write.
type Result struct {
	Accepted bool `json:"accepted"`
	// Highest is the resource's highest token after the write.
	Highest int64 `json:"highest"`
	// Error says why a write was rejected.
	Error string `json:"error,omitempty"`
}

// Record is a write as the store received it.
type Record struct {
	Write
	// Seq numbers the resource's writes from 1 in the order the store received them.
	Seq      int64     `json:"seq"`
	Accepted bool      `json:"accepted"`
	Time     time.Time `json:"time"`
}

// Resource is the state of one resource.
type Resource struct {
	Name string `json:"name"`
	// Highest is the highest token accepted so far, and HighestWriter the writer that set it.
	Highest       int64  `json:"highest"`
	HighestWriter string `json:"highestWriter,omitempty"`
	// Accepted and Rejected count the writes.
	Accepted int64 `json:"accepted"`
	Rejected int64 `json:"rejected"`
	// Conflicts counts accepted writes that carried the highest token but came from another
	// writer than the one that set it. It is 0 while tokens are unique to one holder.
	Conflicts int64 `json:"conflicts"`
	// Writes are the most recent writes, oldest first (see WithHistory).
	Writes []Record `json:"writes"`
}
