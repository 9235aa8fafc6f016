package sidecaraccess_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/testing/localkube"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// TestPolicyTypeChecks runs kube-controller-manager's ValidatingAdmissionPolicy status controller,
// which type-checks the policies' CEL against the Pod, RoleBinding and ClusterRoleBinding schemas
// and reports mistakes (a misspelt field, a wrong type) as warnings in the policy's status, where
// users would see them. The sidecars' policy and the operator's must have none.
func TestPolicyTypeChecks(t *testing.T) {
	f := setup(t)
	binDir, ok, err := localkube.Installed(localkube.Config{})
	if err != nil || !ok {
		msg := fmt.Sprintf("kube-controller-manager is not installed (%v); try: go run ./hack/kube install", err)
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// A kubeconfig with the admin credentials, for the controller manager.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: f.admin.Host, CertificateAuthorityData: f.admin.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: f.admin.CertData, ClientKeyData: f.admin.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var out testenv.SyncBuffer
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, localkube.KubeControllerManager),
		"--kubeconfig="+kubeconfig, "--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--controllers=validatingadmissionpolicy-status-controller", "--leader-elect=false", "--secure-port=0")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait() // killed by the cancelled context
		if t.Failed() {
			t.Logf("kube-controller-manager output:\n%s", out.String())
		}
	})

	for _, name := range []string{"baton-sidecar-own-pod", "baton-operator-pods", "baton-operator-rolebindings"} {
		var vap admissionregistrationv1.ValidatingAdmissionPolicy
		eventually(t, "type checking of the policy "+name, func(ctx context.Context) (bool, string) {
			if err := f.c.Get(ctx, client.ObjectKey{Name: name}, &vap); err != nil {
				return false, err.Error()
			}
			return vap.Status.TypeChecking != nil && vap.Status.ObservedGeneration == vap.Generation,
				fmt.Sprintf("generation %d, status %+v", vap.Generation, vap.Status)
		})
		for _, w := range vap.Status.TypeChecking.ExpressionWarnings {
			t.Errorf("%s: %s: %s", name, w.FieldRef, w.Warning)
		}
	}
}
