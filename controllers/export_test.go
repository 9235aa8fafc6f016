package controllers

// The unexported names the external tests (package controllers_test) use, under their test names.

// Revocation annotations.
var (
	ParseRevoke  = parseRevoke
	FormatRevoke = formatRevoke
)

// Hand-off on rollouts.
type (
	Handoff    = handoff
	Contenders = contenders
)

// SupersededPods is supersededPods.
var SupersededPods = supersededPods

// Store connection policy.
var ErrConnectionNotAllowed = errConnectionNotAllowed

// SchemaNotCreated is schemaNotCreated.
var SchemaNotCreated = schemaNotCreated

// Reasons of events and conditions.
const (
	ReasonConnecting   = reasonConnecting
	ReasonRevokeBound  = reasonRevokeBound
	ReasonRevokeFailed = reasonRevokeFailed
	ReasonSuperseded   = reasonSuperseded
)
