package sidecarclient

import (
	"fmt"
	"net/http"
)

// Error is an error answer from the API as a Client sees it. Use errors.As to get it, or
// errors.Is with the sentinel errors (ErrLocked, ErrAcquiring, ErrHeldByPod, ErrNotHeld, ...).
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the machine-readable kind of error, e.g. "locked" or "bad_request"; empty if the
	// server sent none.
	Code string
	// Message says what was wrong and how to fix it.
	Message string
	// Lock is the lock's status when the server sent it (409 answers about a lock).
	Lock *LockStatus
}

// Error returns "baton: <status> <status text>: <message>".
func (e *Error) Error() string {
	return fmt.Sprintf("baton: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is makes errors.Is(err, ErrLocked) and friends work on errors a Client returns.
func (e *Error) Is(target error) bool {
	s := sentinelFor(e.Code)
	return s != nil && s == target
}

// Error codes in error answers (ErrorBody.Code).
const (
	CodeBadRequest       = "bad_request"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTooLarge         = "too_large"
	CodeUnknownLock      = "unknown_lock"
	CodeNotTryMode       = "not_try_mode"
	CodeNotHeld          = "not_held"
	CodeLocked           = "locked"
	CodeAppNotReady      = "app_not_ready"
	CodeSuperseded       = "superseded"
	CodeShuttingDown     = "shutting_down"
	CodeStarting         = "starting"
	CodeAcquiring        = "acquiring"
	CodeHeldByPod        = "held_by_pod"
	CodeTokenMismatch    = "token_mismatch"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
)

// sentinelFor returns the sentinel error an error code stands for, or nil.
func sentinelFor(code string) error {
	switch code {
	case CodeUnknownLock:
		return ErrUnknownLock
	case CodeNotTryMode:
		return ErrNotTryMode
	case CodeNotHeld:
		return ErrNotHeld
	case CodeLocked:
		return ErrLocked
	case CodeAppNotReady:
		return ErrAppNotReady
	case CodeSuperseded:
		return ErrSuperseded
	case CodeShuttingDown:
		return ErrShuttingDown
	case CodeStarting:
		return ErrStarting
	case CodeAcquiring:
		return ErrAcquiring
	case CodeHeldByPod:
		return ErrHeldByPod
	case CodeTokenMismatch:
		return ErrTokenMismatch
	}
	return nil
}

// ErrorBody is the JSON of every error answer. A 409 about a lock embeds the lock's status, so
// the body reads as a LockStatus with an error.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	*LockStatus
}
