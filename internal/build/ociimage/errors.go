package ociimage

import "errors"

// ErrInvalidSpec wraps every problem Build finds in a Spec before it reads any file.
var ErrInvalidSpec = errors.New("ociimage: invalid image spec")
