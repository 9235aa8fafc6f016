package cassandrastore

import (
	"errors"
	"strings"
	"testing"
)

// TestVersionPolicy: which release_version strings a lock may run on (CASSANDRA-12126 fixed in
// 3.0.24, 3.11.10 and 4.0-beta4), and that the parser tolerates what servers and vendors report.
func TestVersionPolicy(t *testing.T) {
	for _, tc := range []struct {
		release string
		safe    bool
	}{
		// The supported lines, current releases.
		{"5.0.9", true},
		{"5.0.0", true},
		{"5.1-SNAPSHOT", true},
		{"4.1.10", true},
		{"4.1-alpha1", true},
		{"4.0.17", true},
		{"4.0.0", true},
		{"4.0", true},
		{"4.0.1-SNAPSHOT", true},
		{"6.0-SNAPSHOT", true},
		// 4.0 pre-releases: the fix landed in beta4.
		{"4.0-beta4", true},
		{"4.0-beta5", true},
		{"4.0-rc1", true},
		{"4.0-RC2", true},
		{"4.0-beta3", false},
		{"4.0-beta4-SNAPSHOT", false}, // a development build before beta4 may lack it
		{"4.0-SNAPSHOT", false},       // cannot tell which 4.0 development build
		{"4.0-alpha4", false},
		{"4.0.0-SNAPSHOT", false},
		{"3.0.24-SNAPSHOT", false},
		{"5.0-SNAPSHOT", true},
		{"4.0-beta", false},
		// 3.11: fixed in 3.11.10.
		{"3.11.10", true},
		{"3.11.17", true},
		{"3.11.11-SNAPSHOT", true},
		{"3.11.10-SNAPSHOT", false},
		{"3.11.9", false},
		{"3.11.4", false},
		{"3.11", false},
		// 3.0: fixed in 3.0.24.
		{"3.0.24", true},
		{"3.0.30", true},
		{"3.0.23", false},
		{"3.0.8", false},
		// Tick-tock releases and older lines never got the fix.
		{"3.10", false},
		{"3.9", false},
		{"3.1.1", false},
		{"3.12.0", false},
		{"2.2.19", false},
		{"2.1.22", false},
		{"2.0.17", false},
		{"1.2.19", false},
		// Vendor spellings.
		{"4.0.0.6816", true},    // a fourth number
		{"4.1.3-vendor1", true}, // a vendor's build of 4.1.3
		{"3.11.10-custom", true},
		{"3.11.9.1", false},
		{" 5.0.2 ", true},
		{"5.0.2+build7", true},
	} {
		t.Run(tc.release, func(t *testing.T) {
			err := checkVersion("10.0.0.7", tc.release)
			switch {
			case tc.safe && err != nil:
				t.Fatalf("refused: %v", err)
			case !tc.safe && err == nil:
				t.Fatal("accepted an unsafe version")
			case !tc.safe && !errors.Is(err, ErrUnsafeServer):
				t.Fatalf("error %v is not ErrUnsafeServer", err)
			case !tc.safe:
				for _, want := range []string{"10.0.0.7", strings.TrimSpace(tc.release), "CASSANDRA-12126", "3.0.24", "3.11.10", "4.0-beta4"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("message %q lacks %q", err, want)
					}
				}
			}
		})
	}
}

// TestUnrecognisedVersionRefused: a release_version that is not a version at all cannot be judged,
// so it is refused with a message that says so.
func TestUnrecognisedVersionRefused(t *testing.T) {
	for _, release := range []string{"", "   ", "unknown", "v5.0.1", "five", "5", "5.x"} {
		err := checkVersion("10.0.0.8", release)
		if !errors.Is(err, ErrUnsafeServer) || !strings.Contains(err.Error(), "not a Cassandra version baton can judge") ||
			!strings.Contains(err.Error(), "10.0.0.8") {
			t.Errorf("release_version %q: got %v, want ErrUnsafeServer saying it cannot be judged", release, err)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want version
	}{
		{"5.0.9", version{major: 5, minor: 0, patch: 9, pre: preRelease}},
		{"4.0-beta4", version{major: 4, minor: 0, pre: preBeta, preNum: 4}},
		{"4.0-rc2-SNAPSHOT", version{major: 4, minor: 0, pre: preRC, preNum: 2, snapshot: true}},
		{"3.11.10-SNAPSHOT", version{major: 3, minor: 11, patch: 10, pre: preRelease, snapshot: true}},
		{"4.0.0.6816", version{major: 4, minor: 0, patch: 0, pre: preRelease}},
		{"4.1.3-vendor", version{major: 4, minor: 1, patch: 3, pre: preRelease}},
		{"4.0-alpha", version{major: 4, minor: 0, pre: preAlpha}},
	} {
		got, err := parseVersion(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseVersion(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// TestPaxosVariant: the paxos_variant settings of Cassandra 4.1+ that turn the fix of
// CASSANDRA-12126 off again are refused; the node that reports it is named.
func TestPaxosVariant(t *testing.T) {
	for variant, safe := range map[string]bool{
		"":   true, // Cassandra before 4.1: no such setting
		"v1": true,
		"v2": true,
		"v1_without_linearizable_reads_or_rejected_writes": false,
		"v2_without_linearizable_reads":                    false,
		"v2_without_linearizable_reads_or_rejected_writes": false,
	} {
		err := checkPaxosVariant("10.0.0.9", variant)
		if safe != (err == nil) || (err != nil && (!errors.Is(err, ErrUnsafeServer) || !strings.Contains(err.Error(), "10.0.0.9") ||
			!strings.Contains(err.Error(), variant))) {
			t.Errorf("paxos_variant %q: %v", variant, err)
		}
	}
}
