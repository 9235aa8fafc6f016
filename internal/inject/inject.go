package inject

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/sidecarcontract"
)

// Names of what Inject adds to a pod (docs/design.md, Names).
const (
	// ContainerName is the sidecar container.
	ContainerName = "baton"
	// SocketVolume is the emptyDir that holds the sidecar's API socket; it is mounted on
	// sidecarcontract.SocketDir in the sidecar and every app container.
	SocketVolume = "baton-socket"
	// CredentialsVolume mounts spec.cassandra.credentialsSecretRef's Secret into the sidecar.
	CredentialsVolume = "baton-cassandra-credentials"
	// CredentialsDir is where CredentialsVolume is mounted, read-only.
	CredentialsDir = "/etc/baton/cassandra-credentials"
	// TLSVolume mounts spec.cassandra.tlsSecretRef's Secret into the sidecar.
	TLSVolume = "baton-cassandra-tls"
	// TLSDir is where TLSVolume is mounted, read-only.
	TLSDir = "/etc/baton/cassandra-tls"
	// SidecarUser is the uid and gid the sidecar runs as (the image's user). Its socket is 0660
	// and owned by this group, so Inject adds the group to the pod's supplemental groups: every
	// app container, whatever user it runs as, can use the socket.
	SidecarUser int64 = 65532
	// TokenVolume gives the sidecar its own service-account token when the pod turns automounting
	// off (automountServiceAccountToken: false): the sidecar needs it to report the lock to its
	// pod, the app containers still get none.
	TokenVolume = "baton-kube-api-access"
	// TokenDir is where TokenVolume is mounted in the sidecar: where Kubernetes clients look.
	TokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// HintPortName names the sidecar's UDP port for hand-off hints (Config.HintPort), so that a
	// NetworkPolicy can allow it by name.
	HintPortName = "baton-hint"
	// MetricsPortName names the sidecar's TCP port for its metrics (Config.MetricsPort), the port
	// a PodMonitor scrapes.
	MetricsPortName = "baton-metrics"
)

// readinessGate is the pod readiness gate of the ReadinessGate traffic policy; the sidecar sets
// the condition.
const readinessGate corev1.PodConditionType = batonv1.ConditionLockHeld

// Binaries in the sidecar image (see the Dockerfile).
const (
	sidecarBinary = "/usr/local/bin/sidecar"
	cliBinary     = "/usr/local/bin/baton"
)

// startupFailureThreshold lets a Blocking-mode sidecar wait for its locks practically forever
// (about 68 years at one probe a second): a standby waits as long as the holder keeps the lock,
// and a startup probe that gave up would restart the sidecar and send it to the back of the queue.
const startupFailureThreshold = math.MaxInt32

// Inject returns a deep copy of pod with the baton sidecar configured from dl and cfg; pod itself
// is never modified. It does not consult Required (the caller does) and it does not look anything
// up: the caller passes the DistributedLock named by the pod's baton.dev/lock annotation, or
// rejects the pod with MissingLockError.
//
// Errors wrap ErrInvalidConfig (cfg), ErrInvalidLock (dl cannot be turned into a working sidecar,
// e.g. no lock IDs or no Cassandra contact points) or ErrConflict (the pod already has a
// container called baton, another volume mounted on SocketDir, or a baton.dev/role label that
// injection would not set).
func Inject(pod *corev1.Pod, dl *batonv1.DistributedLock, cfg Config) (*corev1.Pod, error) {
	if pod == nil {
		return nil, errors.New("inject: no pod")
	}
	if dl == nil {
		return nil, errors.New("inject: no DistributedLock")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if want := strings.TrimSpace(pod.Annotations[batonv1.AnnotationLock]); want != "" && want != dl.Name {
		return nil, fmt.Errorf("%w: pod's annotation %s names %q, but DistributedLock %q was given",
			ErrInvalidLock, batonv1.AnnotationLock, want, dl.Name)
	}
	if pod.Namespace != "" && dl.Namespace != "" && pod.Namespace != dl.Namespace {
		return nil, fmt.Errorf("%w: DistributedLock %s/%s is not in the pod's namespace %q",
			ErrInvalidLock, dl.Namespace, dl.Name, pod.Namespace)
	}
	s, err := resolve(dl, WorkloadOf(pod), cfg)
	if err != nil {
		return nil, err
	}
	if hasContainer(pod, ContainerName) {
		return nil, fmt.Errorf("%w: it already has a container named %q", ErrConflict, ContainerName)
	}
	if err := checkRoleLabel(pod, s.traffic); err != nil {
		return nil, err
	}

	out := pod.DeepCopy()
	spec := &out.Spec
	socketMount := corev1.VolumeMount{Name: SocketVolume, MountPath: sidecarcontract.SocketDir}

	// 1. Volumes: the socket directory, and the Secrets the sidecar reads.
	setVolume(&spec.Volumes, corev1.Volume{
		Name:         SocketVolume,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
	})
	for _, sv := range s.secrets {
		setVolume(&spec.Volumes, corev1.Volume{
			Name:         sv.volume,
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: sv.secret}},
		})
	}

	// The sidecar's token when the pod has none and the sidecar reports to the pod.
	tokenless := spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken
	if tokenless && s.needsAPI() {
		setVolume(&spec.Volumes, tokenVolume())
	}
	// Every container joins the socket's group.
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if !slices.Contains(spec.SecurityContext.SupplementalGroups, SidecarUser) {
		spec.SecurityContext.SupplementalGroups = append(spec.SecurityContext.SupplementalGroups, SidecarUser)
	}

	// 2. App containers (not init containers): the socket and where to find it.
	for i := range spec.Containers {
		c := &spec.Containers[i]
		if err := setMount(c, socketMount); err != nil {
			return nil, err
		}
		setEnv(&c.Env, corev1.EnvVar{Name: sidecarcontract.EnvSocket, Value: sidecarcontract.SocketPath})
		setEnv(&c.Env, corev1.EnvVar{Name: sidecarcontract.EnvLocks, Value: strings.Join(s.lockIDs, ",")})
	}

	// 3. The sidecar.
	sc := sidecarContainer(s, cfg, socketMount)
	if tokenless && s.needsAPI() {
		sc.VolumeMounts = append(sc.VolumeMounts, corev1.VolumeMount{Name: TokenVolume, MountPath: TokenDir, ReadOnly: true})
	}
	if cfg.NativeSidecars {
		// A native sidecar: started first, before the other init containers, kept running
		// (restartPolicy Always) and stopped after the app containers, so Jobs complete.
		sc.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		spec.InitContainers = append([]corev1.Container{sc}, spec.InitContainers...)
	} else {
		// A regular container: Kubernetes stops all containers at once, so the preStop hook holds
		// back the sidecar's SIGTERM while the app stops, and the locks are released after it.
		sc.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{sidecarBinary, "pre-stop", "--wait=" + cfg.ShutdownTimeout.String()},
		}}}
		spec.Containers = append(spec.Containers, sc)
	}

	// 4. Traffic: only the holder is Ready under the ReadinessGate policy.
	if s.traffic == batonv1.TrafficReadinessGate && !hasReadinessGate(spec, readinessGate) {
		spec.ReadinessGates = append(spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: readinessGate})
	}

	// 5. Mark the pod, so that it is never injected twice.
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[batonv1.AnnotationInjected] = cfg.Image
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	out.Labels[batonv1.LabelInjected] = "true"
	// 6. No pod starts out as the holder: under the Label policy the sidecar relabels its pod once
	// it holds the locks (checkRoleLabel refused any other value the author set).
	if s.traffic == batonv1.TrafficLabel {
		out.Labels[batonv1.LabelRole] = batonv1.RoleStandby
	}
	return out, nil
}

// checkRoleLabel refuses a pod whose author set baton.dev/role to what injection would not: any
// value but standby under the Label policy (a pod never starts as the holder), any value under
// the others (where nobody maintains it, so it is a claim nobody checks). The pod is refused
// rather than relabelled: a workload's selector may use the label, and a ReplicaSet whose pods
// lose it would create new ones without end.
func checkRoleLabel(pod *corev1.Pod, traffic batonv1.TrafficPolicy) error {
	role, ok := pod.Labels[batonv1.LabelRole]
	switch {
	case !ok, traffic == batonv1.TrafficLabel && role == batonv1.RoleStandby:
		return nil
	case traffic == batonv1.TrafficLabel:
		return fmt.Errorf("%w: it has the label %s=%q, which the sidecar sets under the Label traffic policy "+
			"(%s until it holds the locks, then %s); remove it from the pod (template), or set it to %s",
			ErrConflict, batonv1.LabelRole, role, batonv1.RoleStandby, batonv1.RoleHolder, batonv1.RoleStandby)
	default:
		return fmt.Errorf("%w: it has the label %s=%q, which baton maintains only under the Label traffic policy "+
			"and the lock's policy is %s; remove it from the pod (template) and from any selector",
			ErrConflict, batonv1.LabelRole, role, traffic)
	}
}

// sidecarContainer builds the baton container, without the parts that depend on where it goes.
func sidecarContainer(s settings, cfg Config, socketMount corev1.VolumeMount) corev1.Container {
	c := corev1.Container{
		Name:            ContainerName,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Env:             s.env(cfg),
		Resources:       *cfg.Resources.DeepCopy(),
		VolumeMounts:    []corev1.VolumeMount{socketMount},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To(SidecarUser),
			RunAsGroup:               ptr.To(SidecarUser),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	for _, sv := range s.secrets {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: sv.volume, MountPath: sv.dir, ReadOnly: true})
	}
	if cfg.HintPort != 0 {
		// Declared for NetworkPolicies and for readers; a container port opens nothing by itself.
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: HintPortName, ContainerPort: cfg.HintPort, Protocol: corev1.ProtocolUDP})
	}
	if cfg.MetricsPort != 0 {
		// Named, so that a PodMonitor scrapes the pods that have it and no others.
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: MetricsPortName, ContainerPort: cfg.MetricsPort, Protocol: corev1.ProtocolTCP})
	}
	if s.holdBack {
		// The app must not start before the locks are held. The kubelet starts the containers
		// after a native sidecar only once the sidecar's startup probe has succeeded, so this
		// probe gates the app (and any later init container) until "baton wait" sees every lock
		// held. A regular container's startup probe gates nothing: on clusters without native
		// sidecars it only keeps the sidecar (and so the pod) from being Ready before that.
		c.StartupProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
				Command: []string{cliBinary, "wait", "--timeout", "0"},
			}},
			PeriodSeconds:    1,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: startupFailureThreshold,
		}
	}
	return c
}

// tokenVolume is the projected service-account token, CA and namespace a Kubernetes client needs,
// as the API server's own automounted volume holds them.
func tokenVolume() corev1.Volume {
	return corev1.Volume{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}}}
}

// settings is a DistributedLock resolved against the operator's defaults.
type settings struct {
	name        string
	lockIDs     []string
	mode        batonv1.LockMode
	lease       time.Duration
	scope       batonv1.LockScope
	traffic     batonv1.TrafficPolicy
	holdBack    bool          // Behaviour.HoldBackApp: the startup probe holds the app back
	yieldAfter  time.Duration // spec.yieldWhenUnready; 0: off
	handoff     batonv1.HandoffPolicy
	conn        batonv1.CassandraConnection // the operator's defaults merged with spec.cassandra
	clusterName string                      // status.cassandraClusterName: the cluster the lock lives on
	secrets     []secretVolume
	fileEnv     []corev1.EnvVar // BATON_CASSANDRA_*_FILE and TLS paths
}

// needsAPI reports whether the sidecar talks to the Kubernetes API: to report the lock to its
// pod, or to read its app's readiness.
func (s settings) needsAPI() bool {
	return s.traffic != batonv1.TrafficNone || s.yieldAfter > 0 || s.handoff == batonv1.HandoffNewestRevision
}

// secretVolume is a Secret mounted read-only into the sidecar.
type secretVolume struct {
	volume, secret, dir string
}

// env is the sidecar's environment: one variable of the sidecar contract's settings each, in a
// fixed order (sidecarcontract.Settings names them all).
func (s settings) env(cfg Config) []corev1.EnvVar {
	v := func(setting sidecarcontract.Setting, value string) corev1.EnvVar {
		return corev1.EnvVar{Name: setting.Env(), Value: value}
	}
	field := func(setting sidecarcontract.Setting, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: setting.Env(), ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path},
		}}
	}
	env := []corev1.EnvVar{
		v(sidecarcontract.LockName, s.name),
		v(sidecarcontract.LockIDs, strings.Join(s.lockIDs, ",")),
		v(sidecarcontract.Mode, string(s.mode)),
		v(sidecarcontract.Lease, s.lease.String()),
		v(sidecarcontract.Scope, string(s.scope)),
		v(sidecarcontract.TrafficPolicy, string(s.traffic)),
	}
	if s.yieldAfter > 0 {
		env = append(env, v(sidecarcontract.YieldWhenUnready, s.yieldAfter.String()))
	}
	if s.handoff == batonv1.HandoffNewestRevision {
		env = append(env, v(sidecarcontract.Handoff, string(s.handoff)))
	}
	env = append(env,
		v(sidecarcontract.CassandraHosts, strings.Join(s.conn.ContactPoints, ",")),
		v(sidecarcontract.Keyspace, s.conn.Keyspace),
	)
	if s.conn.LocalDC != "" {
		env = append(env, v(sidecarcontract.LocalDC, s.conn.LocalDC))
	}
	env = append(env,
		v(sidecarcontract.Consistency, string(s.conn.Consistency)),
		v(sidecarcontract.SerialConsistency, string(s.conn.SerialConsistency)),
	)
	if s.clusterName != "" {
		// The sidecar refuses to start on any other cluster: edited contact points cannot move
		// new pods to another cluster while old pods hold the lock on this one.
		env = append(env, v(sidecarcontract.ClusterName, s.clusterName))
	}
	env = append(env, s.fileEnv...)
	env = append(env,
		field(sidecarcontract.PodNamespace, "metadata.namespace"),
		field(sidecarcontract.PodName, "metadata.name"),
		field(sidecarcontract.PodUID, "metadata.uid"),
		v(sidecarcontract.Socket, sidecarcontract.SocketPath),
		v(sidecarcontract.ShutdownTimeout, cfg.ShutdownTimeout.String()),
	)
	if cfg.HintPort != 0 {
		env = append(env,
			field(sidecarcontract.PodIP, "status.podIP"),
			v(sidecarcontract.HintPort, strconv.Itoa(int(cfg.HintPort))),
		)
	}
	if cfg.MetricsPort != 0 {
		// Every address of the pod's network namespace: its IP for Prometheus, loopback for the pod.
		env = append(env, v(sidecarcontract.MetricsAddr, ":"+strconv.Itoa(int(cfg.MetricsPort))))
	}
	return env
}

// resolve validates dl and merges it with the defaults of workload w (Defaults) and the
// operator's, reporting every problem at once.
func resolve(dl *batonv1.DistributedLock, w Workload, cfg Config) (settings, error) {
	var p problems
	sp := dl.Spec
	b := Defaults(sp, w)
	s := settings{
		name:        dl.Name,
		lockIDs:     sp.LockIDs,
		mode:        b.Mode,
		scope:       cmp.Or(sp.Scope, batonv1.ScopeNamespace),
		traffic:     b.Traffic,
		holdBack:    b.HoldBackApp,
		handoff:     cmp.Or(sp.Handoff, batonv1.HandoffQueueOrder),
		conn:        cfg.StoreConnection(dl),
		clusterName: dl.Status.CassandraClusterName,
	}
	if dl.Name == "" {
		p.add("metadata.name is empty")
	}
	for _, problem := range sidecarcontract.LockIDProblems(sp.LockIDs) {
		p.add("spec.lockIds %s", problem)
	}
	if s.mode != batonv1.ModeBlocking && s.mode != batonv1.ModeTry {
		p.add("spec.mode %q: use Blocking or Try", s.mode)
	}
	switch s.traffic {
	case batonv1.TrafficReadinessGate, batonv1.TrafficLabel, batonv1.TrafficNone:
	default:
		p.add("spec.trafficPolicy %q: use ReadinessGate, Label or None", s.traffic)
	}
	if s.handoff != batonv1.HandoffQueueOrder && s.handoff != batonv1.HandoffNewestRevision {
		p.add("spec.handoff %q: use QueueOrder or NewestRevision", s.handoff)
	}
	switch s.scope {
	case batonv1.ScopeNamespace:
	case batonv1.ScopeGlobal:
		if msg := cfg.globalScopeProblem(dl.Namespace); msg != "" {
			p.add("%s", msg)
		}
	default:
		p.add("spec.scope %q: use Namespace or Global", s.scope)
	}
	def, errDef := time.ParseDuration(batonv1.DefaultLeaseDuration)
	lo, errLo := time.ParseDuration(batonv1.MinLeaseDuration)
	hi, errHi := time.ParseDuration(batonv1.MaxLeaseDuration)
	if err := errors.Join(errDef, errLo, errHi); err != nil {
		p.add("the API's lease bounds do not parse: %v", err) // a bug in package v1, not in dl
	}
	s.lease = def
	if sp.LeaseDuration != nil {
		s.lease = sp.LeaseDuration.Duration
	}
	if s.lease < lo || s.lease > hi {
		p.add("spec.leaseDuration %v: use %v to %v", s.lease, lo, hi)
	}
	if sp.YieldWhenUnready != nil {
		s.yieldAfter = sp.YieldWhenUnready.Duration
		lo, errLo := time.ParseDuration(batonv1.MinYieldWhenUnready)
		hi, errHi := time.ParseDuration(batonv1.MaxYieldWhenUnready)
		if err := errors.Join(errLo, errHi); err != nil {
			p.add("the API's yieldWhenUnready bounds do not parse: %v", err) // a bug in package v1, not in dl
		}
		if s.yieldAfter < lo || s.yieldAfter > hi {
			p.add("spec.yieldWhenUnready %v: use %s to %s, or leave it unset", s.yieldAfter, batonv1.MinYieldWhenUnready, batonv1.MaxYieldWhenUnready)
		}
	}

	if c := sp.Cassandra; c != nil {
		if ref := c.CredentialsSecretRef; ref != nil {
			if ref.Name == "" {
				p.add("spec.cassandra.credentialsSecretRef.name is empty")
			}
			s.secrets = append(s.secrets, secretVolume{CredentialsVolume, ref.Name, CredentialsDir})
			s.fileEnv = append(s.fileEnv,
				corev1.EnvVar{Name: sidecarcontract.UsernameFile.Env(), Value: path.Join(CredentialsDir, cmp.Or(ref.UsernameKey, "username"))},
				corev1.EnvVar{Name: sidecarcontract.PasswordFile.Env(), Value: path.Join(CredentialsDir, cmp.Or(ref.PasswordKey, "password"))},
			)
		}
		if ref := c.TLSSecretRef; ref != nil {
			if ref.Name == "" {
				p.add("spec.cassandra.tlsSecretRef.name is empty")
			}
			s.secrets = append(s.secrets, secretVolume{TLSVolume, ref.Name, TLSDir})
			s.fileEnv = append(s.fileEnv,
				corev1.EnvVar{Name: sidecarcontract.TLSCA.Env(), Value: path.Join(TLSDir, cmp.Or(ref.CAKey, "ca.crt"))},
				corev1.EnvVar{Name: sidecarcontract.TLSCert.Env(), Value: path.Join(TLSDir, cmp.Or(ref.CertKey, "tls.crt"))},
				corev1.EnvVar{Name: sidecarcontract.TLSKey.Env(), Value: path.Join(TLSDir, cmp.Or(ref.KeyKey, "tls.key"))},
			)
			if name := s.conn.TLSServerName; name != "" {
				s.fileEnv = append(s.fileEnv, corev1.EnvVar{Name: sidecarcontract.TLSServerName.Env(), Value: name})
			}
		}
	}
	c := s.conn
	if len(c.ContactPoints) == 0 {
		p.add("no Cassandra contact points: set spec.cassandra.contactPoints or the operator's default contact points")
	}
	p.contactPoints(c.ContactPoints)
	if !sidecarcontract.ValidKeyspace(c.Keyspace) {
		p.add("Cassandra keyspace %q: a letter, then up to 47 letters, digits or '_'", c.Keyspace)
	}
	p.consistencies(c.Consistency, c.SerialConsistency)
	if c.LocalDC == "" && sidecarcontract.NeedsLocalDC(c.Consistency, c.SerialConsistency) {
		p.add("Cassandra consistency %s/%s is local to a data center: set spec.cassandra.localDC", c.Consistency, c.SerialConsistency)
	}
	if s.scope == batonv1.ScopeGlobal && c.SerialConsistency == batonv1.SerialConsistencyLocalSerial {
		// The CRD refuses this in spec; here it may come from the operator's default.
		p.add("serial consistency LOCAL_SERIAL with scope Global: a Global lock is shared across data centers and clusters, and LOCAL_SERIAL makes it exclusive only within one data center; set spec.cassandra.serialConsistency: SERIAL")
	}
	return s, p.err(func(msg string) error {
		return fmt.Errorf("%w %s/%s: %s", ErrInvalidLock, dl.Namespace, dl.Name, msg)
	})
}

// setVolume replaces the volume called v.Name, or appends v.
func setVolume(vols *[]corev1.Volume, v corev1.Volume) {
	for i := range *vols {
		if (*vols)[i].Name == v.Name {
			(*vols)[i] = v
			return
		}
	}
	*vols = append(*vols, v)
}

// setMount mounts m into c, replacing a mount of the same volume; another volume already mounted
// on m's path is a conflict.
func setMount(c *corev1.Container, m corev1.VolumeMount) error {
	for i, have := range c.VolumeMounts {
		switch {
		case have.Name == m.Name:
			c.VolumeMounts[i] = m
			return nil
		case path.Clean(have.MountPath) == m.MountPath:
			return fmt.Errorf("%w: container %q mounts volume %q on %s, where the sidecar's socket goes: mount it elsewhere",
				ErrConflict, c.Name, have.Name, m.MountPath)
		}
	}
	c.VolumeMounts = append(c.VolumeMounts, m)
	return nil
}

// setEnv sets e in env: it replaces the first variable of that name, drops any later duplicates
// and keeps the order of the rest; a new variable goes last.
func setEnv(env *[]corev1.EnvVar, e corev1.EnvVar) {
	out := (*env)[:0]
	done := false
	for _, have := range *env {
		if have.Name != e.Name {
			out = append(out, have)
			continue
		}
		if !done {
			out = append(out, e)
			done = true
		}
	}
	if !done {
		out = append(out, e)
	}
	*env = out
}

func hasReadinessGate(spec *corev1.PodSpec, condition corev1.PodConditionType) bool {
	for _, g := range spec.ReadinessGates {
		if g.ConditionType == condition {
			return true
		}
	}
	return false
}
