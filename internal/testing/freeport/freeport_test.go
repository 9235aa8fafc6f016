//go:build unix

package freeport

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const childEnv = "FREEPORT_TEST_CHILD"

func TestPortsAreDistinctAndBindable(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := Port("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p < first || p > last {
			t.Fatalf("port %d outside %d-%d", p, first, last)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice in one process", p)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		l.Close()
	}
}

// TestPortsAreDistinctAcrossProcesses holds 200 ports here and has a second process, this test
// binary run again, take 200 more: none may be one of ours.
func TestPortsAreDistinctAcrossProcesses(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		var out []string
		for range 200 {
			p, err := Port("127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strconv.Itoa(p))
		}
		os.Stdout.WriteString("PORTS " + strings.Join(out, " ") + "\n")
		return
	}
	ours := map[int]bool{}
	for range 200 {
		p, err := Port("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		ours[p] = true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPortsAreDistinctAcrossProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, b)
	}
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "PORTS ") {
			line = strings.TrimPrefix(l, "PORTS ")
		}
	}
	fields := strings.Fields(line)
	if len(fields) != 200 {
		t.Fatalf("child printed %d ports, want 200:\n%s", len(fields), b)
	}
	for _, f := range fields {
		p, _ := strconv.Atoi(f)
		if ours[p] {
			t.Errorf("port %d reserved here was handed to the child process too", p)
		}
	}
}
