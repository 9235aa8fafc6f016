package demoapp

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/baton-dev/baton/sidecarclient"
)

func TestConfigFromEnv(t *testing.T) {
	host := func() (string, error) { return "host-1", nil }
	noHost := func() (string, error) { return "", errors.New("no host name") }
	for _, tc := range []struct {
		name     string
		env      map[string]string
		hostname func() (string, error)
		want     Config
		wantErr  []string
	}{
		{"defaults", map[string]string{}, host,
			Config{PodName: "host-1", Socket: sidecarclient.SocketPath, WriteInterval: time.Second, ListenAddr: ":8080"}, nil},
		{"everything set", map[string]string{
			"POD_NAME": "demo-0", "BATON_SOCKET": "/s.sock", "LOCK_ID": "orders", "FENCED_URL": "http://fenced:8080/v1/resources/demo",
			"WRITE_INTERVAL": "250ms", "LISTEN_ADDR": "127.0.0.1:9000", "CONTEND": "true",
		}, noHost,
			Config{PodName: "demo-0", Socket: "/s.sock", LockID: "orders", FencedURL: "http://fenced:8080/v1/resources/demo",
				WriteInterval: 250 * time.Millisecond, ListenAddr: "127.0.0.1:9000", Contend: true}, nil},
		{"bad contend", map[string]string{"POD_NAME": "p", "CONTEND": "yes"}, host, Config{}, []string{`CONTEND="yes": want true or false`}},
		{"no pod name", map[string]string{}, noHost, Config{}, []string{"POD_NAME is unset", "no host name"}},
		{"bad interval", map[string]string{"POD_NAME": "p", "WRITE_INTERVAL": "soon"}, host, Config{}, []string{`WRITE_INTERVAL="soon"`}},
		{"every problem", map[string]string{"POD_NAME": "p", "WRITE_INTERVAL": "1ms", "FENCED_URL": "fenced:8080"}, host, Config{},
			[]string{"write interval 1ms", `FENCED_URL="fenced:8080"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConfigFromEnv(func(k string) string { return tc.env[k] }, tc.hostname)
			if len(tc.wantErr) > 0 {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("ConfigFromEnv: %v, want ErrInvalidConfig", err)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
