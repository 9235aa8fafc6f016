//go:build !unix

package localkube

import "context"

// lockFile is a no-op where flock is unavailable: concurrent installs are
// not serialised there.
func lockFile(context.Context, string, func()) (unlock func(), err error) { return func() {}, nil }
