package lock

// The mutation seams (mutation.go), exported to this package's tests only.

// Mutations lists the unsafe variants of the simulation's mutation test by name.
func Mutations() []string { return mutationList() }

// WithMutation makes the Locker one of the deliberately unsafe variants, for the simulation's
// mutation test only.
func WithMutation(name string) Option { return withMutation(name) }

// WithoutFairnessGuard keeps a CAS-first grant even when others are queued.
func WithoutFairnessGuard() Option { return withoutFairnessGuard() }

// WithoutWholeQueueReads keeps every queue read after the first bounded.
func WithoutWholeQueueReads() Option { return withoutWholeQueueReads() }

// WithoutDeadWaiterSkip makes waiters count every entry ahead of them until it ages out.
func WithoutDeadWaiterSkip() Option { return withoutDeadWaiterSkip() }
