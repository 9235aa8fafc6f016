// Package webhook is the admission plumbing around internal/inject: PodInjector decodes a pod
// from an AdmissionReview, denies it when it already carries baton's injection markers
// (inject.Marked), asks inject.Required, looks up the DistributedLock named by the pod's
// baton.dev/lock annotation and answers with a JSON patch computed by diffing the original pod
// and the one inject.Inject returns; it denies an update that changes the markers.
// MutatingWebhookConfiguration builds the configuration the chart installs so that only annotated
// or marked pods, and updates changing a marker, reach the webhook, which then fails closed.
//
// Not guaranteed: the package neither serves TLS nor creates or rotates certificates (the
// operator's webhook server and certificate manager do), and it does not install the
// configuration. A lock that is deleted after a pod was admitted is not noticed here. The markers
// are guarded only while the configuration is installed: pods created or relabelled without it
// were not checked.
package webhook
