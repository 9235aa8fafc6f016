package api

import (
	"fmt"
	"net/http"
)

// Error is an error answer from the API as a Client sees it. Use errors.As to get it, or
// errors.Is with ErrUnknownLock, ErrNotTryMode, ErrNotHeld or ErrLocked.
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

// Error returns "api: <status> <status text>: <message>".
func (e *Error) Error() string {
	return fmt.Sprintf("api: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is makes errors.Is(err, ErrLocked) and friends work on errors a Client returns.
func (e *Error) Is(target error) bool {
	s := sentinelFor(e.Code)
	return s != nil && s == target
}

// Error codes in error answers.
const (
	codeBadRequest       = "bad_request"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeTooLarge         = "too_large"
	codeUnknownLock      = "unknown_lock"
	codeNotTryMode       = "not_try_mode"
	codeNotHeld          = "not_held"
	codeLocked           = "locked"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
)

// sentinelFor returns the sentinel error an error code stands for, or nil.
func sentinelFor(code string) error {
	switch code {
	case codeUnknownLock:
		return ErrUnknownLock
	case codeNotTryMode:
		return ErrNotTryMode
	case codeNotHeld:
		return ErrNotHeld
	case codeLocked:
		return ErrLocked
	}
	return nil
}

// errorBody is the JSON of every error answer. A 409 about a lock embeds the lock's status, so
// the body reads as a LockStatus with an error.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	*LockStatus
}

// apiError is an error answer the handler is about to write.
type apiError struct {
	status int
	code   string
	msg    string
	lock   *LockStatus
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: codeBadRequest, msg: fmt.Sprintf(format, args...)}
}
