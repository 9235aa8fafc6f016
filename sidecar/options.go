package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/cassandraflags"
	"github.com/baton-dev/baton/internal/sidecarcontract"
	"github.com/baton-dev/baton/lock"
	"github.com/baton-dev/baton/lock/cassandrastore"
)

// Options is the sidecar's configuration. Every field has a flag and an environment variable (what
// the injecting webhook sets; see sidecarcontract.Settings); flags win.
type Options struct {
	LockName      string                // name of the DistributedLock the pod references
	LockIDs       []string              // the lock IDs the pod holds
	Mode          batonv1.LockMode      // Blocking or Try
	Lease         time.Duration         // lease duration
	Scope         batonv1.LockScope     // Namespace or Global
	TrafficPolicy batonv1.TrafficPolicy // ReadinessGate, Label or None
	// YieldWhenUnready gives the locks up once the app containers have not been ready this long
	// (spec.yieldWhenUnready); 0 turns it off.
	YieldWhenUnready time.Duration
	// Handoff is spec.handoff: with NewestRevision the sidecar keeps away from its locks while
	// its pod carries the annotation baton.dev/superseded.
	Handoff batonv1.HandoffPolicy
	// Cassandra is the lock store connection, with the credential and TLS files already read. Its
	// ClusterName, when set, is the cluster the DistributedLock lives on
	// (status.cassandraClusterName, injected by the webhook): the sidecar refuses any other.
	Cassandra  cassandrastore.Connection
	Pod        PodIdentity
	SocketPath string // unix socket of the localhost API
	ListenTCP  string // optional loopback TCP address of the API ("" = off)
	// MetricsAddr is where the Prometheus metrics are served: loopback by default, ":<port>" for
	// the pod's IP (the webhook's --sidecar-metrics-port). ListenTCP, the lock API, is loopback only.
	MetricsAddr string
	// HintPort is the UDP port on the pod IP where other sidecars send hand-off hints (see
	// lock.Hinter and package hintudp); 0 turns hints off, and waiters then only poll.
	HintPort int
	// HintAllowLoopback lets hints use loopback addresses (hintudp.Config.AllowLoopback): for
	// development setups with several sidecars on one host, each with a loopback "pod IP". Off, a
	// loopback pod IP with hints on is a configuration error.
	HintAllowLoopback bool
	ShutdownTimeout   time.Duration // bound on releasing locks at SIGTERM
	Kubeconfig        string        // kubeconfig outside a cluster ("" = in-cluster config)
}

// PodIdentity is the pod the sidecar runs in, from the downward API.
type PodIdentity struct {
	Namespace, Name, UID string
	IP                   string // status.podIP; needed only for hand-off hints
}

// ParseOptions reads options from args and, for anything not given as a flag, from getenv. It
// validates them and returns every problem at once; the credential and TLS files are read here.
func ParseOptions(args []string, getenv func(string) string) (Options, error) {
	fs := flag.NewFlagSet("baton-sidecar", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	v := sidecarcontract.Register(fs, getenv, sidecarcontract.Settings()...)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Options{}, err
		}
		return Options{}, fmt.Errorf("sidecar: %w (run with -h for the list of settings)", err)
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("sidecar: unexpected argument %q: every setting is a --flag or an environment variable", fs.Arg(0))
	}
	var errs []error
	dur := func(s sidecarcontract.Setting) time.Duration {
		d, err := time.ParseDuration(v.Get(s))
		if err != nil {
			errs = append(errs, sidecarcontract.Errorf(s, "is %q: want a duration such as 15s", v.Get(s)))
		}
		return d
	}
	o := Options{
		LockName:      v.Get(sidecarcontract.LockName),
		LockIDs:       sidecarcontract.SplitList(v.Get(sidecarcontract.LockIDs)),
		Mode:          oneOf(v.Get(sidecarcontract.Mode), batonv1.ModeBlocking, batonv1.ModeTry),
		Lease:         dur(sidecarcontract.Lease),
		Scope:         oneOf(v.Get(sidecarcontract.Scope), batonv1.ScopeNamespace, batonv1.ScopeGlobal),
		TrafficPolicy: oneOf(v.Get(sidecarcontract.TrafficPolicy), batonv1.TrafficReadinessGate, batonv1.TrafficLabel, batonv1.TrafficNone),
		Pod: PodIdentity{Namespace: v.Get(sidecarcontract.PodNamespace), Name: v.Get(sidecarcontract.PodName),
			UID: v.Get(sidecarcontract.PodUID), IP: v.Get(sidecarcontract.PodIP)},
		SocketPath:       v.Get(sidecarcontract.Socket),
		ListenTCP:        v.Get(sidecarcontract.ListenTCP),
		MetricsAddr:      v.Get(sidecarcontract.MetricsAddr),
		ShutdownTimeout:  dur(sidecarcontract.ShutdownTimeout),
		YieldWhenUnready: dur(sidecarcontract.YieldWhenUnready),
		Handoff:          oneOf(v.Get(sidecarcontract.Handoff), batonv1.HandoffQueueOrder, batonv1.HandoffNewestRevision),
		Kubeconfig:       v.Get(sidecarcontract.Kubeconfig),
	}
	if port, err := strconv.Atoi(v.Get(sidecarcontract.HintPort)); err != nil {
		errs = append(errs, sidecarcontract.Errorf(sidecarcontract.HintPort, "is %q: want a UDP port number, or 0 for no hints", v.Get(sidecarcontract.HintPort)))
	} else {
		o.HintPort = port
	}
	if allow, err := strconv.ParseBool(v.Get(sidecarcontract.HintAllowLoopback)); err != nil {
		errs = append(errs, sidecarcontract.Errorf(sidecarcontract.HintAllowLoopback, "is %q: want true or false", v.Get(sidecarcontract.HintAllowLoopback)))
	} else {
		o.HintAllowLoopback = allow
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("sidecar: invalid configuration:\n  %w", joinLines(errs))
	}
	o.Cassandra, errs = cassandraflags.Read(v)
	if errs = append(errs, o.problems()...); len(errs) > 0 {
		return o, fmt.Errorf("sidecar: invalid configuration:\n  %w", joinLines(errs))
	}
	return o, nil
}

// oneOf returns the value of allowed that equals s ignoring case (every enumerated setting is
// case-insensitive, as the Cassandra consistencies are), or s as given for Validate to report.
func oneOf[T ~string](s string, allowed ...T) T {
	for _, a := range allowed {
		if strings.EqualFold(s, string(a)) {
			return a
		}
	}
	return T(s)
}

// Validate checks every option but the Cassandra connection (ParseOptions checks that while it
// reads it) and returns all problems at once, each naming the flag, its environment variable and
// what to do.
func (o Options) Validate() error {
	if errs := o.problems(); len(errs) > 0 {
		return fmt.Errorf("sidecar: invalid configuration:\n  %w", joinLines(errs))
	}
	return nil
}

// problems lists what Validate reports, one *sidecarcontract.SettingError each.
func (o Options) problems() []error {
	var errs []error
	bad := func(s sidecarcontract.Setting, format string, args ...any) {
		errs = append(errs, sidecarcontract.Errorf(s, format, args...))
	}
	for _, p := range sidecarcontract.LockIDProblems(o.LockIDs) {
		bad(sidecarcontract.LockIDs, "%s", p)
	}
	if o.Mode != batonv1.ModeBlocking && o.Mode != batonv1.ModeTry {
		bad(sidecarcontract.Mode, "is %q: use Blocking or Try", o.Mode)
	}
	if o.Lease < lock.MinLease || o.Lease > lock.MaxLease {
		bad(sidecarcontract.Lease, "is %v: use %v to %v", o.Lease, lock.MinLease, lock.MaxLease)
	}
	if o.Scope != batonv1.ScopeNamespace && o.Scope != batonv1.ScopeGlobal {
		bad(sidecarcontract.Scope, "is %q: use Namespace or Global", o.Scope)
	}
	if !slices.Contains([]batonv1.TrafficPolicy{batonv1.TrafficReadinessGate, batonv1.TrafficLabel, batonv1.TrafficNone}, o.TrafficPolicy) {
		bad(sidecarcontract.TrafficPolicy, "is %q: use ReadinessGate, Label or None", o.TrafficPolicy)
	}
	p := o.Pod
	for s, v := range map[sidecarcontract.Setting]string{sidecarcontract.PodNamespace: p.Namespace,
		sidecarcontract.PodName: p.Name, sidecarcontract.PodUID: p.UID} {
		if v == "" {
			bad(s, "is empty: set it from the downward API (fieldRef metadata.%s)", strings.TrimPrefix(s.Flag(), "pod-"))
		} else if strings.ContainsAny(v, "/# \t\n") {
			bad(s, "is %q: it must not contain '/', '#' or spaces", v)
		}
	}
	if o.SocketPath == "" || !strings.HasPrefix(o.SocketPath, "/") {
		bad(sidecarcontract.Socket, "is %q: give an absolute path", o.SocketPath)
	}
	if err := checkMetricsAddr(o.MetricsAddr); err != nil {
		errs = append(errs, err)
	}
	if o.HintPort < 0 || o.HintPort > 65535 {
		bad(sidecarcontract.HintPort, "is %d: use a UDP port from 1 to 65535, or 0 for no hints", o.HintPort)
	} else if o.HintPort > 0 {
		if addr, err := o.HintAddr(); err != nil {
			bad(sidecarcontract.PodIP, "is %q: hand-off hints (%s %d) need this pod's IP; set it from the downward API (fieldRef status.podIP), or set %s to 0",
				o.Pod.IP, sidecarcontract.HintPort.Env(), o.HintPort, sidecarcontract.HintPort.Env())
		} else if addr.Addr().IsLoopback() && !o.HintAllowLoopback {
			bad(sidecarcontract.PodIP, "is %q, a loopback address, which no other pod reaches with hand-off hints (%s %d): set it from the downward API (fieldRef status.podIP); only a development setup with several sidecars on one host sets %s=true",
				o.Pod.IP, sidecarcontract.HintPort.Env(), o.HintPort, sidecarcontract.HintAllowLoopback.Env())
		}
	}
	if lo, hi := durationOf(batonv1.MinYieldWhenUnready), durationOf(batonv1.MaxYieldWhenUnready); o.YieldWhenUnready != 0 && (o.YieldWhenUnready < lo || o.YieldWhenUnready > hi) {
		bad(sidecarcontract.YieldWhenUnready, "is %v: use %s to %s, or 0 to keep the locks whatever the app's readiness",
			o.YieldWhenUnready, batonv1.MinYieldWhenUnready, batonv1.MaxYieldWhenUnready)
	}
	if o.Handoff != batonv1.HandoffQueueOrder && o.Handoff != batonv1.HandoffNewestRevision {
		bad(sidecarcontract.Handoff, "is %q: use QueueOrder or NewestRevision", o.Handoff)
	}
	if o.ShutdownTimeout <= 0 {
		bad(sidecarcontract.ShutdownTimeout, "is %v: give a positive duration", o.ShutdownTimeout)
	}
	return errs
}

// WatchesPod reports whether the sidecar reads its pod: for the app's readiness
// (YieldWhenUnready) or the operator's superseded mark (Handoff NewestRevision).
func (o Options) WatchesPod() bool {
	return o.YieldWhenUnready > 0 || o.Handoff == batonv1.HandoffNewestRevision
}

// durationOf parses one of package v1's duration constants.
func durationOf(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic("sidecar: package v1 has a bound that is not a duration: " + s)
	}
	return d
}

// HintAddr returns where the sidecar listens for hand-off hints: the pod IP and HintPort.
func (o Options) HintAddr() (netip.AddrPort, error) {
	ip, err := netip.ParseAddr(o.Pod.IP)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("sidecar: pod IP %q: %w", o.Pod.IP, err)
	}
	if ip.IsUnspecified() || ip.IsMulticast() {
		return netip.AddrPort{}, fmt.Errorf("sidecar: pod IP %q cannot receive hints", o.Pod.IP)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(o.HintPort)), nil
}

// Owner returns the lock owner identity of this pod: namespace/name/uid.
func (o Options) Owner() string {
	return sidecarcontract.OwnerIdentity(o.Pod.Namespace, o.Pod.Name, o.Pod.UID)
}

// StoreLockID maps a declared lock ID to its key in the store: "<namespace>/<id>", or
// "_global/<id>" for the Global scope.
func (o Options) StoreLockID(id string) string {
	return sidecarcontract.StoreLockID(o.Scope, o.Pod.Namespace, id)
}

// joinLines joins errors one per line, indented under the summary.
func joinLines(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	slices.Sort(msgs)
	return errors.New(strings.Join(msgs, "\n  "))
}

// Usage writes every setting with its flag, environment variable, meaning and default.
func Usage(w io.Writer) {
	fmt.Fprintln(w, "baton sidecar settings (a flag wins over its environment variable):")
	sidecarcontract.WriteUsage(w, sidecarcontract.Settings()...)
}
