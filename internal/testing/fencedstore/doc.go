// Package fencedstore is a resource guarded by fencing tokens, for demos and tests of baton: an
// HTTP server that accepts a write only if its token is at least the highest token it has seen
// for that resource, and keeps the history, so that a test can count what fencing stopped.
//
// A holder of a baton lock sends its fencing token (sidecarclient.LockStatus.Token) with each
// write. Once a newer holder has written with a higher token, every write of an older holder that
// still believes it holds the lock (paused, partitioned, its lease run out) is rejected: the
// store answers 409 and the Client returns ErrRejected. A write with the current highest token
// from another writer than the one that set it is accepted but counted as a conflict: two writers
// holding the same token is what fencing tokens rule out.
//
//	POST /v1/resources/{name}/writes   Write -> Result (200 accepted, 409 rejected)
//	GET  /v1/resources/{name}          Resource: counts and the recent writes
//	GET  /v1/resources                 {"resources":[Resource...]} sorted by name
//	GET  /healthz                      200 "ok"
//
// What it does not guarantee: nothing is persisted (a restart forgets every token), and it judges
// tokens only; it cannot tell that two writes overlapped in time unless their tokens say so.
package fencedstore
