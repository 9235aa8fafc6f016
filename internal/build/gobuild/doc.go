// Package gobuild is the build plumbing shared by localkube and localnode:
// it builds the commands of other Go modules (Kubernetes, etcd, helm,
// containerd, the CNI plugins) with the machine's go command into a cache
// directory, from throwaway modules that are not part of the baton module.
//
// A [Tool] is one such module and the binaries built from it:
//
//	<Dir>/src/<Name>/          the throwaway module (go.mod with tool directives)
//	<Dir>/bin/<binary>...      the binaries, each renamed into place when built
//	<Dir>/.installed-<Name>    stamp, written only after every binary is in place
//	<Dir>/build-<Name>.log     the go commands and their output
//	<Dir>/.lock                serialises the builds in Dir between processes
//
// [Install] makes a Tool's binaries present: a matching stamp makes it a
// cheap no-op (one "cache reused" line); otherwise it takes the directory's
// file lock, checks again, and builds. Every go command runs with
// GOFLAGS=-mod=mod -buildvcs=false and GOWORK=off, so that neither a vendor
// directory nor a go.work above the cache interferes. go build prints
// nothing while it compiles, so a [Builder] prints a line when each step
// starts and ends and a heartbeat line every minute in between. Steps that
// wait on the network (go mod download and tidy; localcassandra's Maven and
// localnode's apt-get use it too) run as a [Step]: the same lines, and an
// attempt given up after a bounded time and tried again, so that a stalled
// download ends in an error that says what to check rather than silence.
//
// What it does not do: it never removes old versions from the cache, never
// checks a binary beyond its stamp and file mode, and relies on the Go
// module proxy (GOPROXY as configured) and the Go build cache for speed; a
// cold build cache makes the first build several minutes longer.
package gobuild
