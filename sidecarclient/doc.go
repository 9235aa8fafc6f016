// Package sidecarclient is how an application talks to its pod's baton sidecar: the types of the
// sidecar's localhost API and a small Go Client for it. It imports only the standard library. Apps
// in other languages speak the same HTTP+JSON protocol on the same socket.
//
// The sidecar serves the API on the unix socket whose path is in the environment variable
// EnvSocket (SocketPath by default; mode 0660, shared with the app through a volume) and
// optionally on loopback TCP. Every response is JSON (application/json) except the event stream.
// Routes:
//
//	GET  /v1/locks                    {"locks":[LockStatus...]}, in declaration order
//	GET  /v1/locks/{lockID}           LockStatus
//	POST /v1/locks/{lockID}/acquire   Try mode only; optional body {"wait":"5s"} or ?wait=5s
//	POST /v1/locks/{lockID}/release   Try mode only; optional body {"token":N}
//	POST /v1/locks/{lockID}/yield     step down; optional body {"wait":"5s","token":N}
//	GET  /v1/events                   Server-Sent Events: "acquired", "lost", "released"
//	GET  /healthz                     liveness: the sidecar is alive and the lock store reachable
//	GET  /readyz                      readiness: every required lock is held
//	GET  /startupz                    startup: the first acquisition is done (Blocking mode)
//
// Every request the sidecar cannot serve gets an error answer {"error":"...","code":"..."}
// (ErrorBody) that says what was wrong and how to fix it: a 4xx for the request, a 503
// (starting, shutting_down, unavailable) or 500 (internal) for the sidecar's own state; a 409, 500 or 503
// about a lock also carries that lock's LockStatus fields. docs/api/sidecar.openapi.yaml lists
// every answer of every route. The Client returns such answers as *Error, which matches the sentinel
// errors (ErrLocked, ErrAcquiring, ErrHeldByPod, ErrTokenMismatch, ErrNotHeld, ...) with
// errors.Is.
//
// The sidecar serves the socket from its start, before it reaches its lock store: until then every
// route, the probes included, answers 503 with code starting (ErrStarting) and a message that says
// what it waits for, e.g. "waiting for Cassandra at cassandra.db:9042: ...". Ask again later.
//
// A Try-mode grant belongs to the one request that got it: an acquire answers 200 only with the
// lock (state held and its token, LockStatus.Granted), and 409 acquiring or held_by_pod to every
// other process of the pod meanwhile; the sidecar cannot tell them apart. Release and yield take
// the grant's token, so that a process whose grant ended cannot release the next one (409
// token_mismatch); without a token they act on whatever grant the pod holds.
//
// What the API does not guarantee: a "held" answer is the sidecar's belief at the moment it
// answered and may be stale by the time the app acts on it (a paused app can outlive its lease).
// Pass the fencing token (LockStatus.Token, Event.Token) to the resource you protect and have it
// reject tokens lower than the highest it has seen. The event stream is a push notice, not a log:
// events sent while no client was connected are not replayed, so re-read /v1/locks after
// (re)connecting, and treat a stream that ends as "the sidecar is going away": assume every lock
// lost.
package sidecarclient
