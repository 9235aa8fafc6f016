package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/build/release"
	"github.com/baton-dev/baton/internal/testing/localnode"
	"github.com/baton-dev/baton/internal/testing/testenv"
)

// releaseVersion is the version the suite releases and installs.
const releaseVersion = "v0.0.0-e2e"

// installed is the release batonCluster installed; set once, under installOnce.
var installed release.Result

// importRelease writes the release of this checkout as make release does (uncommitted changes
// allowed: the binaries then state commit <sha>-dirty) into a directory of t's, and imports its
// image archive into the node's containerd as kind load image-archive does (ctr images import).
// batonCluster then installs the release's packaged chart.
func importRelease(t *testing.T, n *localnode.Node, helm string) (release.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var progress bytes.Buffer
	res, err := release.Build(ctx, release.Config{
		Version: releaseVersion, SourceDir: "../..", OutDir: t.TempDir(), Helm: helm, AllowDirty: true, Progress: &progress,
	})
	if err != nil {
		return res, fmt.Errorf("make release: %w\n%s", err, &progress)
	}
	built := time.Since(start)
	start = time.Now()
	if err := n.ImportImage(ctx, res.ImageArchive); err != nil {
		return res, err
	}
	t.Logf("release %s (commit %s) written in %s, its image archive imported in %s",
		res.Version, res.Commit, built.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	installed = res
	return res, nil
}

// TestReleaseInstalled: baton on the node is the release as a user installs it: helm lists the
// packaged chart at the release's version, the operator runs the image the chart names by default
// (the archive's, imported under that name and never pulled), and every binary in it states the
// release's version and commit for --version.
func TestReleaseInstalled(t *testing.T) {
	c := batonCluster(t)
	if installed.Version != releaseVersion {
		t.Fatalf("batonCluster installed release %+v, want %s", installed, releaseVersion)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	out, err := exec.CommandContext(ctx, testenv.Helm(t), "list", "--kubeconfig", c.node.Kubeconfig,
		"--namespace", "baton-system", "--output", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("helm list: %v\n%s", err, out)
	}
	var releases []struct {
		Chart      string `json:"chart"`
		Status     string `json:"status"`
		AppVersion string `json:"app_version"`
	}
	if err := json.Unmarshal(out, &releases); err != nil {
		t.Fatalf("helm list: %v\n%s", err, out)
	}
	wantChart := "baton-" + installed.ChartVersion
	if len(releases) != 1 || releases[0].Chart != wantChart || releases[0].AppVersion != installed.ChartVersion || releases[0].Status != "deployed" {
		t.Errorf("helm list: %+v, want one deployed release of chart %s, app version %s", releases, wantChart, installed.ChartVersion)
	}

	dep, err := c.kube.AppsV1().Deployments("baton-system").Get(ctx, "baton-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if ctr.Image != installed.Image.Tag || ctr.ImagePullPolicy != corev1.PullNever {
		t.Errorf("the operator runs %s (pull %s), want the release's %s, never pulled", ctr.Image, ctr.ImagePullPolicy, installed.Image.Tag)
	}
	pods, err := c.kube.CoreV1().Pods("baton-system").List(ctx, metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(dep.Spec.Selector)})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, st := range p.Status.ContainerStatuses {
			id, digest := strings.TrimPrefix(installed.Image.ID, "sha256:"), strings.TrimPrefix(installed.Image.Digest, "sha256:")
			if !strings.Contains(st.ImageID, id) && !strings.Contains(st.ImageID, digest) {
				t.Errorf("pod %s container %s runs image %s, not the release's (id %s, digest %s)", p.Name, st.Name, st.ImageID, installed.Image.ID, installed.Image.Digest)
			}
		}
	}

	for bin, name := range map[string]string{"operator": "baton-operator", "sidecar": "baton-sidecar", "baton": "baton"} {
		out, err := exec.CommandContext(ctx, c.kubectl, "--kubeconfig", c.node.Kubeconfig, "exec", "--namespace", "baton-system",
			"deploy/baton-operator", "--container", ctr.Name, "--", "/usr/local/bin/"+bin, "--version").CombinedOutput()
		want := fmt.Sprintf("%s %s commit %s (", name, installed.Version, installed.Commit)
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s --version in the operator's pod: %v, %q; want %q...", bin, err, out, want)
		}
	}
}
