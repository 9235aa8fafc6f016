package inject

import (
	"errors"
	"fmt"
	"strings"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

var (
	// ErrInvalidConfig wraps every problem Config.Validate finds.
	ErrInvalidConfig = errors.New("inject: invalid configuration")
	// ErrInvalidLock wraps every reason a DistributedLock cannot be injected from.
	ErrInvalidLock = errors.New("inject: invalid DistributedLock")
	// ErrConflict wraps a pod that already has something Inject would add with a different
	// meaning (a container called baton, another volume on the socket directory, ...).
	ErrConflict = errors.New("inject: pod conflicts with the baton sidecar")
)

// LockNotFoundError says that the DistributedLock named by a pod's baton.dev/lock annotation does
// not exist. The webhook returns it to reject the pod; its message tells the user what to do.
type LockNotFoundError struct {
	Namespace, Name string
}

func (e *LockNotFoundError) Error() string {
	return fmt.Sprintf("DistributedLock %s/%s referenced by annotation %s not found: create it or fix the annotation",
		e.Namespace, e.Name, batonv1.AnnotationLock)
}

// MissingLockError returns the error for a pod whose baton.dev/lock annotation names a
// DistributedLock that does not exist; find it with errors.As and *LockNotFoundError.
func MissingLockError(namespace, name string) error {
	return &LockNotFoundError{Namespace: namespace, Name: name}
}

// problems collects validation failures so that all of them are reported at once.
type problems []string

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

// err returns nil without problems, else wrap applied to the problems joined by "; ".
func (p problems) err(wrap func(msg string) error) error {
	if len(p) == 0 {
		return nil
	}
	return wrap(strings.Join(p, "; "))
}
