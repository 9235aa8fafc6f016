// Package api is the sidecar's localhost API: an http.Handler that lets the app, in any language,
// see and steer the locks its baton sidecar holds, and a small Client for the baton CLI and tests.
//
// The sidecar serves the handler on the unix socket SocketPath (see ListenUnix, which creates it
// with mode 0660) and optionally on loopback TCP. Every response is JSON
// (application/json) except the event stream. Routes:
//
//	GET  /v1/locks                    {"locks":[LockStatus...]}, in declaration order
//	GET  /v1/locks/{lockID}           LockStatus
//	POST /v1/locks/{lockID}/acquire   Try mode only; optional body {"wait":"5s"} or ?wait=5s
//	POST /v1/locks/{lockID}/release   Try mode only
//	GET  /v1/events                   Server-Sent Events: "acquired", "lost", "released"
//	GET  /healthz                     liveness: the sidecar is alive and the lock store reachable
//	GET  /readyz                      readiness: every required lock is held
//	GET  /startupz                    startup: the first acquisition is done (Blocking mode)
//
// Every request the handler cannot serve gets a 4xx answer {"error":"...","code":"..."} that says
// what was wrong and how to fix it; a 409 about a lock also carries that lock's LockStatus fields.
// The handler never panics: a panic in a Service is logged and answered with 500.
//
// What the API does not guarantee: a "held" answer is the sidecar's belief at the moment it
// answered and may be stale by the time the app acts on it (a paused app can outlive its lease).
// Pass the fencing token (LockStatus.Token, Event.Token) to the resource you protect and have it
// reject tokens lower than the highest it has seen. The event stream is a push notice, not a log:
// events sent while no client was connected are not replayed, so re-read /v1/locks after
// (re)connecting, and treat a stream that ends as "the sidecar is going away": assume every lock
// lost.
//
// The package knows nothing of how locks are held; the sidecar's lock holder implements Service.
package api
