package demoapp

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/baton-dev/baton/sidecarclient"
)

// The environment variables ConfigFromEnv reads.
const (
	EnvPodName       = "POD_NAME"       // default: the host name
	EnvLockID        = "LOCK_ID"        // default: the first lock the sidecar declares
	EnvFencedURL     = "FENCED_URL"     // default: no writes
	EnvWriteInterval = "WRITE_INTERVAL" // default: DefaultWriteInterval
	EnvListenAddr    = "LISTEN_ADDR"    // default: DefaultListenAddr
	EnvJobWrites     = "JOB_WRITES"     // demoapp job: how many writes (default: DefaultJobWrites)
	EnvContend       = "CONTEND"        // "true": ask for the lock (Try mode); default: only report it
)

// Defaults of Config.
const (
	DefaultWriteInterval = time.Second
	DefaultListenAddr    = ":8080"
	DefaultJobWrites     = 5
)

// ErrInvalidConfig wraps every problem Config.Validate finds.
var ErrInvalidConfig = errors.New("demoapp: invalid configuration")

// Config is the app's configuration.
type Config struct {
	// PodName is the app's name in answers and writes. Required.
	PodName string
	// Socket is the sidecar's API socket (sidecarclient.EnvSocket; default
	// sidecarclient.SocketPath).
	Socket string
	// LockID is the lock the app reports and writes under; empty: the first lock the sidecar
	// declares.
	LockID string
	// FencedURL is the fenced resource the app writes to while it holds the lock, e.g.
	// "http://fenced:8080/v1/resources/demo"; empty: the app does not write.
	FencedURL string
	// WriteInterval is the time between writes (10ms to 1h; default DefaultWriteInterval).
	WriteInterval time.Duration
	// ListenAddr is where the app serves HTTP (default DefaultListenAddr).
	ListenAddr string
	// Contend makes the app ask the sidecar for the lock and ask again whenever it stops holding
	// it (for a Try-mode lock; see App.Contend).
	Contend bool
}

// ConfigFromEnv reads a Config from the variables Env*, sidecarclient.EnvSocket and, when
// POD_NAME is unset, the host name, and validates it.
func ConfigFromEnv(getenv func(string) string, hostname func() (string, error)) (Config, error) {
	c := Config{
		PodName:    getenv(EnvPodName),
		Socket:     getenv(sidecarclient.EnvSocket),
		LockID:     getenv(EnvLockID),
		FencedURL:  getenv(EnvFencedURL),
		ListenAddr: getenv(EnvListenAddr),
	}
	switch v := getenv(EnvContend); v {
	case "", "false":
	case "true":
		c.Contend = true
	default:
		return c, fmt.Errorf("%w: %s=%q: want true or false", ErrInvalidConfig, EnvContend, v)
	}
	if c.PodName == "" {
		h, err := hostname()
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s is unset and the host name unknown: %w", ErrInvalidConfig, EnvPodName, err)
		}
		c.PodName = h
	}
	if s := getenv(EnvWriteInterval); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return Config{}, fmt.Errorf("%w: %s=%q: want a duration such as 500ms", ErrInvalidConfig, EnvWriteInterval, s)
		}
		c.WriteInterval = d
	}
	c.setDefaults()
	return c, c.Validate()
}

func (c *Config) setDefaults() {
	if c.Socket == "" {
		c.Socket = sidecarclient.SocketPath
	}
	if c.WriteInterval == 0 {
		c.WriteInterval = DefaultWriteInterval
	}
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
}

// Validate returns an error wrapping ErrInvalidConfig that lists every problem of c, whose
// defaults must be set.
func (c Config) Validate() error {
	var p []string
	if strings.TrimSpace(c.PodName) == "" {
		p = append(p, "the pod name is empty: set "+EnvPodName)
	}
	if c.WriteInterval < 10*time.Millisecond || c.WriteInterval > time.Hour {
		p = append(p, fmt.Sprintf("write interval %v: use 10ms to 1h (%s)", c.WriteInterval, EnvWriteInterval))
	}
	if c.FencedURL != "" {
		if u, err := url.Parse(c.FencedURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p = append(p, fmt.Sprintf("%s=%q: want an http(s) URL such as http://fenced:8080/v1/resources/demo", EnvFencedURL, c.FencedURL))
		}
	}
	if len(p) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(p, "; "))
	}
	return nil
}
