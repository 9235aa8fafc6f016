// Package controllers holds baton's operator logic: the DistributedLock reconciler and, in
// subpackages, the pod injection core (inject) and the admission webhook (webhook).
//
// This file set starts with the pure part of the reconciler: turning lock-store snapshots into
// DistributedLock status and noticing holder changes.
package controllers
