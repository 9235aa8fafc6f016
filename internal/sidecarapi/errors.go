package sidecarapi

import (
	"fmt"
	"net/http"

	"github.com/baton-dev/baton/sidecarclient"
)

// apiError is an error answer the handler is about to write.
type apiError struct {
	status int
	code   string
	msg    string
	lock   *sidecarclient.LockStatus
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: sidecarclient.CodeBadRequest, msg: fmt.Sprintf(format, args...)}
}
