package charts_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFlagsNamedAfterValues: the operator flag each chart value sets is the value's path in
// kebab case (cassandra.allowAnonymous: --cassandra-allow-anonymous), so that a setting has one
// name in the chart, on the command line and in the docs. The exceptions are listed, with why.
// It reads the Deployment template, not a rendering: every flag the template sets from a value.
func TestFlagsNamedAfterValues(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("baton", "templates", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	exceptions := map[string]string{
		"metrics.port":                      "metrics-bind-address", // controller-runtime's name; the value is a port, the flag an address
		"metrics.enabled":                   "metrics-bind-address", // "0" disables it
		"metrics.certSecret":                "metrics-cert-dir",     // the Secret is mounted there
		"leaderElection.enabled":            "leader-elect",         // controller-runtime's name
		"sidecar.nativeSidecars":            "native-sidecars",
		"sidecar.resources.requests.cpu":    "sidecar-cpu-request",
		"sidecar.resources.requests.memory": "sidecar-memory-request",
		"sidecar.resources.limits.cpu":      "sidecar-cpu-limit",
		"sidecar.resources.limits.memory":   "sidecar-memory-limit",
	}
	// A flag set from a value on its line ({{ include "baton.arg" (list "flag" .Values.path) }}),
	// or from the value a preceding with/if line names.
	arg := regexp.MustCompile(`list "([a-z-]+)" \(?(?:[a-z]+ )*(?:\(?[a-z]+ [^)]*\)? )?\.Values\.([A-Za-z.]+)`)
	guard := regexp.MustCompile(`\{\{- (?:with|if) (?:include "baton.commaList" )?\.Values\.([A-Za-z.]+) \}\}`)
	flagOnly := regexp.MustCompile(`list "([a-z-]+)" `)
	kebab := regexp.MustCompile(`([a-z0-9])([A-Z])`)
	var guarded string
	checked := 0
	for _, line := range strings.Split(string(data), "\n") {
		var flag, path string
		if m := guard.FindStringSubmatch(line); m != nil {
			guarded = m[1]
			continue
		}
		if m := arg.FindStringSubmatch(line); m != nil {
			flag, path = m[1], m[2]
		} else if m := flagOnly.FindStringSubmatch(line); m != nil && guarded != "" && strings.Contains(line, "baton.arg") {
			flag, path = m[1], guarded
		}
		if strings.Contains(line, "{{- end }}") {
			guarded = ""
		}
		if flag == "" {
			continue
		}
		checked++
		want := strings.ReplaceAll(kebabCase(kebab, path), ".", "-")
		if e, ok := exceptions[path]; ok {
			want = e
		}
		if flag != want {
			t.Errorf("value %s sets --%s; want --%s (or list it as an exception, with why)", path, flag, want)
		}
	}
	t.Logf("%d flags set from values checked", checked)
	if checked < 15 {
		t.Errorf("checked %d flags set from values; the template's form changed?", checked)
	}
}

func kebabCase(re *regexp.Regexp, s string) string {
	return strings.ToLower(re.ReplaceAllString(s, "$1-$2"))
}
