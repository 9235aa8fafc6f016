// Package testpki makes throwaway TLS material for tests: a CA and certificates it signs, PEM
// encoded, in memory or written to files. Keys are ECDSA P-256; nothing is meant to be secure.
package testpki
