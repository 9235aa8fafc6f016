// Package testpki makes throwaway TLS material for tests and local clusters (localnode): a CA and
// certificates it signs, PEM encoded, in memory or written to files. It is baton's one CA
// generator outside the product (the operator's webhook certificates come from cert-controller).
// Keys are ECDSA P-256; nothing is meant to be secure.
package testpki
