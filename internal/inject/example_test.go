package inject_test

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1"
	"github.com/baton-dev/baton/internal/inject"
)

// The webhook's whole decision: ask the policy, look up the lock, inject a copy. The admission
// response is then the diff of pod and out (admission.PatchResponseFromRaw).
func Example() {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "worker-0",
			Annotations: map[string]string{batonv1.AnnotationLock: "orders"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker:1"}}},
	}
	if ok, reason := inject.Required(pod); !ok {
		fmt.Println("allowed unchanged:", reason)
		return
	}
	dl := &batonv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec:       batonv1.DistributedLockSpec{LockIDs: []string{"orders"}},
	}
	cfg := inject.Config{
		Image:          "ghcr.io/baton-dev/baton:v0.1.0",
		Cassandra:      batonv1.CassandraConnection{ContactPoints: []string{"cassandra.baton-system:9042"}},
		NativeSidecars: true,
	}
	out, err := inject.Inject(pod, dl, cfg)
	if err != nil {
		fmt.Println("denied:", err)
		return
	}
	fmt.Println(out.Spec.InitContainers[0].Name, *out.Spec.InitContainers[0].RestartPolicy)
	fmt.Println(out.Spec.Containers[0].Env[1].Name + "=" + out.Spec.Containers[0].Env[1].Value)
	fmt.Println(out.Spec.ReadinessGates[0].ConditionType)
	fmt.Println(len(pod.Spec.InitContainers), "init containers in the original")
	// Output:
	// baton Always
	// BATON_LOCKS=orders
	// baton.dev/lock-held
	// 0 init containers in the original
}

func ExampleMissingLockError() {
	err := fmt.Errorf("webhook: %w", inject.MissingLockError("shop", "orders"))
	var nf *inject.LockNotFoundError
	fmt.Println(errors.As(err, &nf), nf)
	// Output:
	// true DistributedLock shop/orders referenced by annotation baton.dev/lock not found: create it or fix the annotation
}
