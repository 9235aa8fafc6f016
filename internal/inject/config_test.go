package inject_test

import (
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/inject"
)

// TestValidateNamesFlags: Validate names each bad setting in words; ValidateFlags names the flag
// its caller says sets it, for exactly the fields it is given.
func TestValidateNamesFlags(t *testing.T) {
	c := inject.Config{Image: "baton:dev", HintPort: 80, MetricsPort: 81, GlobalNamespaces: []string{"Team_A"}}
	words := c.Validate().Error()
	for _, want := range []string{"hint port 80: use 1024", "metrics port 81: use 1024", `global namespace "Team_A" is not a namespace name`} {
		if !strings.Contains(words, want) {
			t.Errorf("Validate: %q lacks %q", words, want)
		}
	}
	flags := c.ValidateFlags(map[string]string{inject.FieldHintPort: "sidecar-hint-port", inject.FieldGlobalNamespaces: "global-namespaces"}).Error()
	for _, want := range []string{"--sidecar-hint-port=80: use 1024", "metrics port 81: use 1024", `--global-namespaces: "Team_A" is not a namespace name`} {
		if !strings.Contains(flags, want) {
			t.Errorf("ValidateFlags: %q lacks %q", flags, want)
		}
	}
	if err := (inject.Config{}).ValidateFlags(map[string]string{inject.FieldImage: "sidecar-image"}); err == nil || !strings.Contains(err.Error(), "--sidecar-image is empty") {
		t.Errorf("no image: %v", err)
	}
}
