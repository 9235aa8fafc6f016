// Package charts holds baton's Helm chart, charts/baton, which installs the operator. It has no
// Go code: its tests render the chart with the real helm and check the result against what the
// rest of the repository generates or builds (the CRD, the operator's RBAC rules, the
// MutatingWebhookConfiguration of internal/webhook, the sidecar access policy), and have a
// real kube-apiserver accept every rendered object (kubectl apply --dry-run=server).
//
// crds/ and files/ in the chart are copies of config/ made by `make manifests`; `make check`
// fails when they are stale. The tests do not check what a running operator does with the
// chart's settings: there is no kubelet here to run its pod.
package charts
