// Package inject decides whether a pod gets baton's sidecar and builds the injected pod. It is the
// one mutation path shared by the operator's admission webhook and any tool that previews
// injection; the webhook is plumbing around it.
//
// Required is the policy: a pure function that says whether a pod should be injected and, when
// not, why (no baton.dev/lock annotation, opted out with baton.dev/inject: "false", host network).
// Marked finds a pod that carries baton's injection markers (baton.dev/injected) before injection,
// which the webhook denies; Injected is the operator's test for a pod the webhook injected.
// Inject is the mutation: it returns a deep copy of the pod with the sidecar container "baton",
// the socket volume, the app environment (BATON_SOCKET, BATON_LOCKS), the readiness gate, the
// label baton.dev/role=standby (Label traffic policy; a pod that sets the label to anything else,
// or at all under the other policies, is refused) and the sidecar's settings taken from the
// DistributedLock and the operator's Config. It never touches its input and never writes a
// patch: the webhook diffs the original and the injected pod (admission.PatchResponseFromRaw).
//
// Defaults fills in what a DistributedLock leaves unset by the kind of workload the pod belongs
// to (WorkloadOf reads its controller owner reference): pods of Deployments, StatefulSets and
// DaemonSets get the Label traffic policy and an app that starts at once, so that every pod is
// Ready and rollouts complete; pods of Jobs and CronJobs keep Blocking with the app held back
// until the locks are held; other pods keep Blocking with ReadinessGate. Explicit settings win.
//
// On clusters with native sidecars (Kubernetes ≥ 1.29, Config.NativeSidecars) the sidecar is the
// first init container with restartPolicy Always: it starts before everything else, in Blocking
// mode its startup probe holds back the app containers until the locks are held, and it stops
// after the app, so Jobs complete. On older clusters it is a regular container with a preStop
// hook that holds back its shutdown while the app stops.
//
// What it does not do: look anything up. The webhook fetches the DistributedLock (denying the pod
// with MissingLockError when there is none) and hands it to Inject, which refuses a lock it cannot
// serve: scope Global outside Config.GlobalNamespaces, or settings the sidecar would refuse. Nobody
// checks at admission that the Secrets a DistributedLock names exist: the operator reports a
// missing Secret in the lock's StoreReachable condition, and the kubelet holds the pod back until
// the Secret exists. On clusters without native sidecars nothing keeps a Blocking-mode app from
// starting before the locks are held (only the sidecar's startup probe fails), and a Job's pod
// completes only if the sidecar exits by itself once the app has.
package inject
