// Package demoapp is the app of baton's demos and end-to-end tests: a small HTTP server that runs
// next to the baton sidecar, answers GET / with its pod name and the fencing token it holds (as
// the sidecar reports it through sidecarclient), and while it holds the lock writes to a fenced
// resource (package fencedstore) with that token, counting what was accepted and rejected.
//
// Its command, hack/demoapp (image baton.local/demoapp), runs the app by default and the
// fenced store with the argument serve-fenced; both are configured by environment variables (see
// ConfigFromEnv).
//
// What it does not guarantee: GET / reports the sidecar's belief at the moment of the request,
// and a write may carry a token that has just been superseded. That is the point: the fenced
// store rejects such writes, and the counts show it.
package demoapp
