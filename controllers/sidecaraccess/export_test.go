package sidecaraccess

// The unexported names the external tests (package sidecaraccess_test) use, under their test names.

// Access is access.
type Access = access

// Desired and ClusterRoles are desired and clusterRoles.
var (
	Desired      = desired
	ClusterRoles = clusterRoles
)
