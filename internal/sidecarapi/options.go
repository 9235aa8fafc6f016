package sidecarapi

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/baton-dev/baton/sidecarclient"
)

// Defaults of the handler options.
const (
	// DefaultKeepAlive is how often the event stream sends a keep-alive comment.
	DefaultKeepAlive = 15 * time.Second
	// DefaultMaxWait is the longest wait an acquire request may ask for: the clients' contract,
	// sidecarclient.MaxWait.
	DefaultMaxWait = sidecarclient.MaxWait
)

// Option configures NewHandler.
type Option func(*options)

type options struct {
	log       logr.Logger
	keepAlive time.Duration
	maxWait   time.Duration
}

func defaultOptions() options {
	return options{log: logr.Discard(), keepAlive: DefaultKeepAlive, maxWait: DefaultMaxWait}
}

// WithLogger sets the logger for panics, internal errors (level 0) and one line per request
// (V(1)). Default: discard.
func WithLogger(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithKeepAlive sets how often the event stream sends a ": keepalive" comment so that idle
// connections are not cut by intermediaries and dead clients are noticed. Must be positive.
// Default: DefaultKeepAlive (15s).
func WithKeepAlive(d time.Duration) Option { return func(o *options) { o.keepAlive = d } }

// WithMaxWait sets the longest wait an acquire request may ask for; longer waits are rejected
// with 400. Zero allows only single tries. Must not be negative. Default: DefaultMaxWait (10m).
func WithMaxWait(d time.Duration) Option { return func(o *options) { o.maxWait = d } }

func (o *options) validate() error {
	if o.log.GetSink() == nil {
		// The zero logr.Logger is usable but silently drops everything; accept it as Discard.
		o.log = logr.Discard()
	}
	if o.keepAlive <= 0 {
		return fmt.Errorf("api: keep-alive interval must be positive, got %v", o.keepAlive)
	}
	if o.maxWait < 0 {
		return fmt.Errorf("api: max wait must not be negative, got %v", o.maxWait)
	}
	return nil
}
