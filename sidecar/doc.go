// Package sidecar is baton's per-pod lock holder: it holds the pod's Cassandra queue locks (package
// lock), serves them to the application over a localhost API (package internal/sidecarapi; apps
// talk to it with package sidecarclient), and tells Kubernetes whether this pod is the holder.
//
// This file set starts with the sidecar's configuration; the holder, the API server, the readiness
// gate and the shutdown sequence build on it.
package sidecar
