package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/internal/suspendclock"
	buildversion "github.com/baton-dev/baton/internal/version"
)

// Exit codes of the baton CLI.
const (
	ExitOK       = 0
	ExitFailure  = 1  // the command failed (timeout, sidecar or Cassandra unreachable)
	ExitUsage    = 2  // the command line is wrong; the message says how to fix it
	ExitTempFail = 75 // EX_TEMPFAIL: run could not get the lock, or lost it while CMD ran
)

// The environment run adds for CMD.
const (
	envToken = "BATON_TOKEN" // the fencing token of the grant CMD runs under
	envLock  = "BATON_LOCK"  // the lock ID
)

// childEnv is the environment run adds for CMD holding lock id with token.
func childEnv(id string, token int64) []string {
	return []string{fmt.Sprintf("%s=%d", envToken, token), envLock + "=" + id}
}

// Defaults of the durations.
const (
	DefaultTimeout = 5 * time.Minute  // wait --timeout
	DefaultWait    = 5 * time.Minute  // run --wait with a sidecar
	DefaultGrace   = 10 * time.Second // run --grace
	// defaultPoll is how often wait and run re-read the sidecar's state besides listening to its
	// event stream: a slow fallback for events sent before the stream was subscribed.
	defaultPoll = 2 * time.Second
)

// Main runs the baton CLI with args (without the program name) and returns the exit code. env
// reads environment variables (os.Getenv); CMD started by run inherits the process environment
// (os.Environ) plus BATON_TOKEN and BATON_LOCK. Cancelling ctx stops waiting, and stops a running
// CMD (SIGTERM, then SIGKILL after --grace). Main never calls os.Exit.
//
// sigs carries the signals the process receives (SIGINT and SIGTERM, from signal.Notify). While
// run supervises CMD, each signal is forwarded to CMD and run exits with CMD's exit code; at any
// other time the first signal stops the command, which exits with 128+signal. sigs may be nil.
func Main(ctx context.Context, sigs <-chan os.Signal, args []string, env func(string) string,
	stdin io.Reader, stdout, stderr io.Writer) int {
	p := newProgram(env, stdin, stdout, stderr)
	return p.main(ctx, sigs, args)
}

// program is one invocation of the CLI.
type program struct {
	env            func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	poll           time.Duration // fallback re-read of the sidecar's state
	pid            int           // in the owner identity host/<hostname>/<pid>/<random> (direct mode)
	signals        *signalRouter
	// clock bounds CMD by the lease's deadline: it counts the time the machine was suspended, as
	// the lease's own clock does (suspendclock.New; tests set their own).
	clock clock.WithDelayedExecution
}

func newProgram(env func(string) string, stdin io.Reader, stdout, stderr io.Writer) *program {
	if env == nil {
		env = func(string) string { return "" }
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &program{env: env, stdin: stdin, stdout: stdout, stderr: stderr, poll: defaultPoll, pid: os.Getpid(),
		clock: suspendclock.New()}
}

func (p *program) main(ctx context.Context, sigs <-chan os.Signal, args []string) int {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	p.signals = &signalRouter{cancel: cancel}
	if sigs != nil {
		go p.signals.loop(ctx, sigs)
	}
	code, err := p.dispatch(ctx, args)
	if err == nil {
		return code
	}
	var ue *usageError
	var ie *interruptedError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(p.stderr, "baton: %s\n", ue.msg)
		if ue.cmd != "" {
			fmt.Fprintf(p.stderr, "Run 'baton help %s' for usage.\n", ue.cmd)
		} else {
			fmt.Fprintln(p.stderr, "Run 'baton help' for usage.")
		}
		return ExitUsage
	case errors.As(context.Cause(ctx), &ie):
		// A signal stopped baton before CMD ran (or CMD exited because of it).
		fmt.Fprintf(p.stderr, "baton: %v\n", ie)
		if code == ExitOK || code == ExitFailure {
			code = 128 + signalNumber(ie.sig)
		}
		return code
	}
	fmt.Fprintf(p.stderr, "baton: %v\n", err)
	if code == ExitOK {
		code = ExitFailure
	}
	return code
}

// dispatch runs one subcommand. It returns the exit code, and an error to print (a *usageError
// exits 2).
func (p *program) dispatch(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		usage(p.stderr, "")
		return ExitUsage, nil
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "help", "-h", "-help", "--help":
		topic := ""
		if len(rest) > 0 {
			topic = rest[0]
			if _, ok := commandUsage[topic]; !ok {
				return 0, usagef("", "no help for %q: the commands are %s", topic, commandList())
			}
		}
		usage(p.stdout, topic)
		return ExitOK, nil
	case "version", "-version", "--version":
		return p.version(rest)
	case "status", "wait", "run", "yield":
		run := map[string]func(context.Context, []string) (int, error){
			"status": p.status, "wait": p.wait, "run": p.run, "yield": p.yield}[cmd]
		code, err := run(ctx, rest)
		if errors.Is(err, errHelp) {
			usage(p.stdout, cmd)
			return ExitOK, nil
		}
		return code, err
	case "schema", "raise-tokens":
		code, err := map[string]func(context.Context, []string) (int, error){"schema": p.schema, "raise-tokens": p.raiseTokens}[cmd](ctx, rest)
		if errors.Is(err, errHelp) {
			usage(p.stdout, cmd)
			return ExitOK, nil
		}
		return code, err
	default:
		if strings.HasPrefix(cmd, "-") {
			return 0, usagef("", "flag %s before the command: write baton COMMAND [flags], e.g. baton status --json", cmd)
		}
		return 0, usagef("", "unknown command %q: the commands are %s", cmd, commandList())
	}
}

// usageError is a wrong command line; it exits 2.
type usageError struct {
	cmd string // subcommand whose usage to point at, "" for the top level
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usagef(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, args...)}
}

// interruptedError is the cancellation cause when baton got a signal while no CMD ran.
type interruptedError struct{ sig os.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + e.sig.String() }

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}

// socketUsage documents --socket in every command's usage.
const socketUsage = "the sidecar's API socket (env " + sidecarcontract.EnvSocket + ", default " + sidecarcontract.SocketPath + ")"

const topUsage = `baton: wait for, inspect and run commands under baton's distributed locks.

Usage:
  baton status [--socket PATH] [--json]
  baton wait   [--socket PATH] [--lock ID] [--timeout 5m]
  baton run    [--socket PATH] [--lock ID] [--wait 5m] [--grace 10s] -- CMD [ARGS...]
  baton run    --cassandra-hosts HOSTS --lock ID [--wait 0] [--lease 15s] [--cassandra-keyspace baton]
               [Cassandra settings] [--create-schema] [--grace 10s] -- CMD [ARGS...]
  baton schema --replication DC:RF[,DC:RF...] [--keyspace baton] [--role NAME]
  baton yield  [--socket PATH] [--lock ID] [--wait 0] [--token N]
  baton raise-tokens --floor N|now --cassandra-hosts HOSTS [--cassandra-keyspace baton] [--lock ID]... [--dry-run]
  baton version
  baton help [COMMAND]

In a pod annotated with ` + batonv1.AnnotationLock + `, status, wait, run and yield talk to the baton sidecar over its
unix socket (--socket, env ` + sidecarcontract.EnvSocket + `, default ` + sidecarcontract.SocketPath + `). Outside Kubernetes,
run takes the lock itself in Cassandra when given --cassandra-hosts (env BATON_CASSANDRA_HOSTS);
it reads the same Cassandra settings as the sidecar (see baton help run).

Exit codes: 0 ok, 1 failure or wait timed out, 2 usage error, 75 run could not get or lost the
lock (yield: not granted again within --wait); otherwise run exits with CMD's code (128+N if CMD was killed by signal N).
`

var commandUsage = map[string]string{
	"schema":       schemaUsage,
	"raise-tokens": raiseTokensUsage(),
	"status": `Usage: baton status [--socket PATH] [--json]

Prints the locks of this pod's sidecar: LOCK, STATE, TOKEN, HOLDER, POSITION (in the queue, while
waiting) and LEASE LEFT (while held).

Flags:
  --socket PATH   ` + socketUsage + `
  --json          print {"locks":[...]} as the API returns it
`,
	"wait": `Usage: baton wait [--socket PATH] [--lock ID] [--timeout 5m]

Blocks until the sidecar holds the lock (every declared lock without --lock) and prints one line
per lock, e.g. "orders token 7". Exits 0 when held, 1 when --timeout passed first.

Flags:
  --socket PATH     ` + socketUsage + `
  --lock ID         the lock to wait for; may be repeated (default: every declared lock)
  --timeout DUR     how long to wait, e.g. 30s or 5m; 0 checks once (default 5m)
`,
	"run": runUsage(),
	"version": `Usage: baton version

Prints the version and the git commit baton was built from (also: baton --version).
`,
	"yield": `Usage: baton yield [--socket PATH] [--lock ID] [--wait DUR] [--token N]

Steps down: the sidecar releases the lock and queues again behind the pods waiting for it, so the
next one is granted now. In Blocking mode the sidecar takes its turn again by itself (the pod is
not ready meanwhile); in Try mode it acquires again, waiting up to --wait. Prints the lock's state
after, e.g. "orders waiting (yielded: queueing again behind the waiters)" or "orders token 9".
Exits 0, 1 when the pod does not hold the lock (with --token: not that grant), 75 in Try mode
when it is not granted again within --wait.

Flags:
  --socket PATH   ` + socketUsage + `
  --lock ID       the lock to yield (default: the only declared lock)
  --wait DUR      Try mode: how long to wait to get the lock back; 0 tries once (default 0)
  --token N       yield only the grant with this fencing token, e.g. $BATON_TOKEN; another grant
                  of the pod (this one ended) is left alone (default: whatever grant it holds)
`,
}

// runUsage is the usage of baton run; its Cassandra settings come from the sidecar's table, so
// both document (and accept) the same flags, variables and defaults.
func runUsage() string {
	var b strings.Builder
	b.WriteString(`Usage: baton run [flags] -- CMD [ARGS...]

Runs CMD while holding a lock, with BATON_TOKEN=<fencing token> and BATON_LOCK=<lock ID> added to
its environment. Stdin, stdout and stderr are passed through, SIGINT and SIGTERM are forwarded.
CMD runs in a process group of its own; what it leaves running there when it exits is killed
before the lock is given back. If the lock is lost while CMD runs, the group gets SIGKILL at once
(another owner may hold the lock already) and baton exits 75. Otherwise baton releases the lock
(if it acquired it) and exits with CMD's exit code.

The lease's deadline bounds CMD: when no renewal came and the deadline is min(--grace, lease/4)
away, the group gets SIGTERM, and it gets SIGKILL just before the deadline, whatever --grace says,
so that nothing CMD started runs once another owner could be granted the lock. The deadline is
measured on a clock that counts the time the machine was suspended (CLOCK_BOOTTIME), as the
lease's own; the error then says when the group was killed and when the deadline was.

With a sidecar (the default): a Try-mode lock is acquired through the sidecar's API, waiting up to
--wait, and CMD runs only when the answer grants it (state held, with a fencing token); another
process of the pod acquiring or holding the lock is exit 75. At the end baton releases its own
grant only, by its token. A Blocking-mode lock is waited for until the sidecar holds it. The
deadline is the one the sidecar last reported.

Without Kubernetes (--cassandra-hosts given): baton takes the lock in Cassandra itself as owner
host/<hostname>/<pid>/<random>, like flock(1) for a cluster. --lock is required, --wait defaults to 0 (try
once: exit 75 if the lock is held). It connects as the sidecar does, with the same settings: TLS,
a user name and password from files, a local data centre, the consistency levels and a check of
the cluster's name.

Flags:
  --socket PATH            ` + socketUsage + `
  --lock ID                the lock to hold (with a sidecar: default the only declared lock)
  --wait DUR               how long to wait for the lock; 0 tries once (default 5m with a sidecar,
                           0 with --cassandra-hosts)
  --grace DUR              how long CMD may take to stop after SIGTERM: when renewals stop it
                           gets SIGTERM min(--grace, lease/4) before the deadline; a lost lock
                           kills at once (default 10s)

Without a sidecar:
  --lease DUR              lease duration in Cassandra; failover after a crash takes about one lease
                           (default 15s, 1s to 1h)
  --create-schema          create the keyspace and tables first if they do not exist
  --verbose                log the lock's progress to stderr
  --hint-addr IP:PORT      receive hand-off hints on this UDP address (an IP others reach this
                           host at): while waiting, the holder's release tells this process at
                           once instead of at its next poll (default: poll only)
  --hint-allow-loopback    development only: let hints use loopback addresses, for several
                           processes on one host (without it, a loopback --hint-addr is refused
                           and hints to loopback addresses read from the lock store are dropped)

Cassandra settings (a flag wins over its environment variable; --cassandra-hosts selects the mode
without a sidecar):
`)
	sidecarcontract.WriteUsage(&b, sidecarcontract.CassandraSettings()...)
	return b.String()
}

// commandList names every command that has a usage, for the messages that list them: "run,
// status, ... and yield".
func commandList() string {
	names := slices.Sorted(maps.Keys(commandUsage))
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// version prints the version line; it takes no arguments.
func (p *program) version(args []string) (int, error) {
	if len(args) > 0 {
		return 0, usagef("version", "baton version takes no arguments, got %q", args[0])
	}
	fmt.Fprintln(p.stdout, buildversion.Line("baton"))
	return ExitOK, nil
}

// usage prints the usage of topic ("" for the overview).
func usage(w io.Writer, topic string) {
	if topic == "" {
		fmt.Fprint(w, topUsage)
		return
	}
	fmt.Fprint(w, commandUsage[topic])
}
