package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
)

// newFlagSet returns a quiet flag set for subcommand cmd: errors come back from parse, usage is
// printed by the caller.
func newFlagSet(cmd string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// errHelp asks for the subcommand's usage on stdout and exit 0.
var errHelp = errors.New("help requested")

// parseFlags parses args into fs; everything after "--" is returned as the command. withCommand
// says whether the subcommand takes one.
func parseFlags(fs *flag.FlagSet, cmd string, args []string, withCommand bool) ([]string, error) {
	var command []string
	if i := slices.Index(args, "--"); i >= 0 {
		args, command = args[:i], args[i+1:]
		if !withCommand {
			return nil, usagef(cmd, "baton %s takes no command after --", cmd)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, usagef(cmd, "%s", dashes.Replace(err.Error()))
	}
	if fs.NArg() > 0 {
		if withCommand {
			return nil, usagef(cmd, "missing -- before the command %q: write baton %s [flags] -- %s",
				fs.Arg(0), cmd, strings.Join(fs.Args(), " "))
		}
		return nil, usagef(cmd, "unexpected argument %q: baton %s takes only flags", fs.Arg(0), cmd)
	}
	return command, nil
}

// dashes spells flags in the flag package's errors the way the usage does: --name.
var dashes = strings.NewReplacer("flag -", "flag --", "defined: -", "defined: --")

// durationValue is a flag.Value for a non-negative duration with a helpful parse error.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, 5m or 1h30m")
	}
	if d < 0 {
		return fmt.Errorf("want a duration of 0 or more, such as 30s")
	}
	*v.d = d
	return nil
}

func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(durationValue{&d}, name, usage)
	return &d
}

// listValue collects a repeatable flag; commas separate values too.
type listValue struct{ l *[]string }

func (v listValue) String() string {
	if v.l == nil {
		return ""
	}
	return strings.Join(*v.l, ",")
}

func (v listValue) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*v.l = append(*v.l, part)
		}
	}
	return nil
}

// flagSet reports whether flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// socketPath returns --socket, else BATON_SOCKET, else the default.
func (p *program) socketPath(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := strings.TrimSpace(p.env(sidecarcontract.EnvSocket)); v != "" {
		return v
	}
	return sidecarcontract.SocketPath
}

// checkSocket fails with a usage error when there is no socket at path. hint is appended.
func checkSocket(cmd, path, hint string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return usagef(cmd, "no sidecar socket at %s: is the pod annotated with %s?%s", path, batonv1.AnnotationLock, hint)
	case err != nil:
		return usagef(cmd, "cannot use the sidecar socket %s: %v; check --socket (BATON_SOCKET)", path, err)
	case fi.Mode()&os.ModeSocket == 0:
		return usagef(cmd, "%s is not a socket; check --socket (BATON_SOCKET)", path)
	}
	return nil
}
