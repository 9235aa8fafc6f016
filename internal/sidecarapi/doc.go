// Package sidecarapi is the server side of the sidecar's localhost API (the protocol and its types
// are in package sidecarclient): an http.Handler for a Service, the sidecar's lock holder; Server,
// which serves it with a bound on slow, idle and surplus connections that long polls and the event
// stream are not cut by; and ListenUnix, which creates the socket with mode 0660 and removes a
// stale one.
//
// The handler never panics: a panic in a Service is logged and answered with 500. It knows nothing
// of how locks are held: that an acquire answers 200 only with a grant, and that a release with a
// token leaves other grants alone, is the Service's to keep (the sidecar's Holder does).
package sidecarapi
