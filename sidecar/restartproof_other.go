//go:build !unix

package sidecar

import "errors"

var errProofHeld = errors.New("sidecar: another live process in this pod holds the restart proof")

// openRestartProof is unavailable without flock: the sidecar runs without zero-wait restart.
func openRestartProof(socket string) ([]byte, func(), error) {
	return nil, nil, errors.New("sidecar: no restart proof on this platform (it needs flock)")
}
