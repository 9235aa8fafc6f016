package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/baton-dev/baton/internal/inject"
)

const (
	// Path is where the operator's webhook server serves PodInjector.
	Path = "/mutate-v1-pod"
	// WebhookName is the name of the webhook inside the configuration.
	WebhookName = "inject.baton.dev"
	// MatchConditionName names the CEL condition that sends only annotated pods to the webhook.
	MatchConditionName = "has-baton-lock-annotation"
	// MatchConditionExpression is the CEL expression of that condition.
	MatchConditionExpression = "has(object.metadata.annotations) && '" + inject.AnnotationLock + "' in object.metadata.annotations"
	// TimeoutSeconds bounds every call of the API server to the webhook.
	TimeoutSeconds = 5
)

// MutatingWebhookConfiguration returns the configuration, called name, that sends the creation
// of every pod carrying the baton.dev/lock annotation to the Service serviceNamespace/serviceName
// (port 443) at path, trusting caBundle. Only annotated pods reach the webhook (matchConditions),
// so it fails closed (failurePolicy Fail) without risking other pods. It does not exclude any
// namespace: an annotated pod in the operator's own namespace waits for the operator.
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
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{""},
					APIVersions: []string{"v1"},
					Resources:   []string{"pods"},
					Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       MatchConditionName,
				Expression: MatchConditionExpression,
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
