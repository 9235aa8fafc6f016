//go:build race

package sidecar

// raceDetector reports whether the test binary was built with -race.
const raceDetector = true
