package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	batonv1 "github.com/baton-dev/baton/api/v1"
)

const (
	// Path is where the operator's webhook server serves PodInjector.
	Path = "/mutate-v1-pod"
	// WebhookName is the name of the webhook inside the configuration.
	WebhookName = "inject.baton.dev"
	// MatchConditionName names the CEL condition that sends the webhook only the creation of a
	// pod with the annotation baton.dev/lock or an injection marker (annotation or label
	// baton.dev/injected), and only the updates that change a marker.
	MatchConditionName = "baton-pod-or-marker-change"
	// TimeoutSeconds bounds every call of the API server to the webhook.
	TimeoutSeconds = 5
)

// MutatingWebhookConfiguration returns the configuration, called name, that sends to the Service
// serviceNamespace/serviceName (port 443) at path, trusting caBundle: the creation of every pod
// carrying the baton.dev/lock annotation or one of baton's injection markers, and every update of
// a pod that changes a marker (which the webhook denies). Only those reach the webhook
// (matchConditions), so it fails closed (failurePolicy Fail) without risking other pods or other
// updates. It does not exclude any namespace: an annotated pod in the operator's own namespace
// waits for the operator.
func MutatingWebhookConfiguration(name, serviceNamespace, serviceName, path string, caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	return configuration(name, admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: serviceNamespace, Name: serviceName, Path: ptr.To(path)},
		CABundle: caBundle,
	})
}

// MutatingWebhookConfigurationForURL is MutatingWebhookConfiguration for a webhook reached at
// url (https://host:port/path), e.g. a test server on localhost.
func MutatingWebhookConfigurationForURL(name, url string, caBundle []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	return configuration(name, admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url), CABundle: caBundle})
}

func configuration(name string, cc admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{
			APIVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			Kind:       "MutatingWebhookConfiguration",
		},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         WebhookName,
			ClientConfig: cc,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{""},
					APIVersions: []string{"v1"},
					// The subresources that take a whole pod take its labels and annotations
					// too (measured in TestForgedInjectionIsDenied).
					Resources: []string{"pods", "pods/status", "pods/ephemeralcontainers", "pods/resize"},
					Scope:     ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       MatchConditionName,
				Expression: matchConditionExpression(),
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			TimeoutSeconds:          ptr.To[int32](TimeoutSeconds),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// matchConditionExpression is the CEL expression of the condition MatchConditionName: at CREATE,
// the pod carries AnnotationLock or a marker (AnnotationInjected, LabelInjected); at UPDATE, a
// marker's value differs from the old pod's. A marker's value is compared prefixed with "=" when
// present, so that a missing key (”) differs from an empty value. It uses has() and 'in' only,
// no optional types, so that older clusters accept it. The chart writes the same expression (a
// chart test compares them).
func matchConditionExpression() string {
	has := func(obj, field, key string) string {
		return "'" + key + "' in " + obj + ".metadata." + field
	}
	marker := func(obj, field, key string) string {
		return "(has(" + obj + ".metadata." + field + ") && " + has(obj, field, key) +
			" ? '=' + " + obj + ".metadata." + field + "['" + key + "'] : '')"
	}
	changed := func(field, key string) string {
		return marker("object", field, key) + " != " + marker("oldObject", field, key)
	}
	onCreate := "(has(object.metadata.annotations) && (" + has("object", "annotations", batonv1.AnnotationLock) + " || " +
		has("object", "annotations", batonv1.AnnotationInjected) + ")) || (has(object.metadata.labels) && " +
		has("object", "labels", batonv1.LabelInjected) + ")"
	onUpdate := changed("annotations", batonv1.AnnotationInjected) + " || " + changed("labels", batonv1.LabelInjected)
	return "request.operation == 'CREATE' ? (" + onCreate + ") : (" + onUpdate + ")"
}
