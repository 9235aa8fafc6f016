package localkube

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// StartEnv installs the control plane if needed (see [Install]) and starts
// env on it: etcd and kube-apiserver from the cache, whatever
// KUBEBUILDER_ASSETS or TEST_ASSET_* say (binary paths env already has are
// kept). It returns the admin rest.Config; the caller stops env with
// env.Stop. env.Start itself is not cancellable; ctx bounds the install.
func StartEnv(ctx context.Context, cfg Config, env *envtest.Environment) (*rest.Config, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	binDir, err := install(ctx, cfg, false)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("localkube: start envtest: %w", err)
	}
	env.BinaryAssetsDirectory = binDir
	// envtest prefers KUBEBUILDER_ASSETS and TEST_ASSET_* over
	// BinaryAssetsDirectory; explicit paths win over both.
	if api := env.ControlPlane.GetAPIServer(); api.Path == "" {
		api.Path = filepath.Join(binDir, KubeAPIServer)
	}
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	if env.ControlPlane.Etcd.Path == "" {
		env.ControlPlane.Etcd.Path = filepath.Join(binDir, Etcd)
	}
	start := time.Now()
	restCfg, err := env.Start()
	if err != nil {
		_ = env.Stop() // whatever did start (e.g. etcd)
		return nil, fmt.Errorf("localkube: start envtest (kube-apiserver %s, etcd %s from %s): %w", KubernetesVersion, EtcdVersion, binDir, err)
	}
	fmt.Fprintf(cfg.Progress, "localkube: envtest kube-apiserver %s up at %s in %s\n", KubernetesVersion, restCfg.Host, time.Since(start).Round(10*time.Millisecond))
	return restCfg, nil
}
