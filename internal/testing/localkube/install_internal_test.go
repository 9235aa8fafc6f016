package localkube

import (
	"strings"
	"testing"
)

func TestKubeGoMod(t *testing.T) {
	upstream := `module k8s.io/kubernetes

go 1.25.0

require (
	k8s.io/api v0.0.0
	k8s.io/utils v0.0.0-20260707023825-cf1189d6abe3
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
)

replace k8s.io/kms => ./staging/src/k8s.io/kms
`
	got, err := kubeGoMod([]byte(upstream))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\ngo 1.25.0\n",
		"\nrequire k8s.io/kubernetes " + KubernetesVersion + "\n",
		"\tk8s.io/api => k8s.io/api " + StagingVersion + "\n",
		"\tk8s.io/client-go => k8s.io/client-go " + StagingVersion + "\n",
		"\tk8s.io/kms => k8s.io/kms " + StagingVersion + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "k8s.io/utils =>") {
		t.Errorf("go.mod replaces a non-staging module:\n%s", got)
	}
	if _, err := kubeGoMod([]byte("module k8s.io/kubernetes\n")); err == nil {
		t.Error("kubeGoMod without staging replaces: want an error")
	}
}

func TestVersionLDFlags(t *testing.T) {
	got := versionLDFlags()
	for _, want := range []string{
		"-X k8s.io/component-base/version.gitVersion=v1.37.1",
		"-X k8s.io/component-base/version.gitMajor=1",
		"-X k8s.io/component-base/version.gitMinor=37",
		"-X k8s.io/client-go/pkg/version.gitVersion=v1.37.1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
}

func TestKubeGoModTools(t *testing.T) {
	upstream := "module k8s.io/kubernetes\n\ngo 1.25.0\n\nreplace k8s.io/api => ./staging/src/k8s.io/api\n"
	got, err := kubeGoMod([]byte(upstream), kubectlPackage)
	if err != nil {
		t.Fatal(err)
	}
	if want := "\ntool k8s.io/kubernetes/cmd/kubectl\n"; !strings.HasSuffix(got, want) {
		t.Errorf("go.mod does not end in %q:\n%s", want, got)
	}
}

func TestHelmGoMod(t *testing.T) {
	got := helmGoMod([]byte("module helm.sh/helm/v3\n\ngo 1.26.0\n\nrequire k8s.io/client-go v0.37.0\n"))
	for _, want := range []string{
		"\nmodule baton.local/localkube/helm\n",
		"\ngo 1.26.0\n",
		"\nrequire helm.sh/helm/v3 " + HelmVersion + "\n",
		"\ntool helm.sh/helm/v3/cmd/helm\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("go.mod lacks %q:\n%s", want, got)
		}
	}
}

func TestHelmLDFlags(t *testing.T) {
	got, err := helmLDFlags("v0.37.0")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-X helm.sh/helm/v3/internal/version.version=" + HelmVersion,
		"-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
		"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
		"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37",
		"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ldflags %q lack %q", got, want)
		}
	}
	for _, bad := range []string{"", "v1.37.0", "v0"} {
		if _, err := helmLDFlags(bad); err == nil {
			t.Errorf("helmLDFlags(%q): want an error", bad)
		}
	}
}
