// Package certfiles keeps a directory's files equal to the data of one Secret: the operator's own
// copy of the webhook certificate it rotates, written as soon as the Secret changes.
//
// A Secret volume would carry the same files, but the kubelet refreshes a mounted Secret only when
// it next syncs the pod: at a container event, or at its periodic sync (every minute by default).
// An operator whose certificate is written after its container started would then wait up to a
// minute and more for the files, not ready, while the webhook that every injected pod needs
// answers nothing. Watching the Secret itself takes that wait out.
package certfiles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// Mirror writes the non-empty values of Keys in Secret Namespace/Name into Dir, one file per
// key, each replaced atomically (written beside it, then renamed), and again whenever the Secret
// changes. A key the Secret lacks or holds empty is left as it is in Dir: a certificate never
// disappears from under a server that is using it.
type Mirror struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	Dir       string
	Keys      []string
	Log       logr.Logger
	// Retry is how long to wait after a failed write before writing again (default 1s).
	Retry time.Duration
}

// NeedLeaderElection is false: every replica serves the webhook from its own directory.
func (m *Mirror) NeedLeaderElection() bool { return false }

// Start mirrors the Secret until ctx ends. It returns an error only for a directory it cannot
// create; a missing Secret, or a write that fails, is logged and retried.
func (m *Mirror) Start(ctx context.Context) error {
	if m.Client == nil || m.Namespace == "" || m.Name == "" || m.Dir == "" || len(m.Keys) == 0 {
		return errors.New("certfiles: Client, Namespace, Name, Dir and Keys are required")
	}
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return fmt.Errorf("certfiles: %w", err)
	}
	retry := m.Retry
	if retry <= 0 {
		retry = time.Second
	}
	one := fields.OneTermEqualSelector("metadata.name", m.Name).String()
	factory := informers.NewSharedInformerFactoryWithOptions(m.Client, 0, informers.WithNamespace(m.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = one }))
	informer := factory.Core().V1().Secrets().Informer()
	changed := make(chan struct{}, 1)
	notify := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
	}); err != nil {
		return fmt.Errorf("certfiles: %w", err)
	}
	factory.StartWithContext(ctx)
	defer factory.Shutdown() // after ctx ended: waits for the informer to stop

	key := m.Namespace + "/" + m.Name
	var pending <-chan time.Time // set while a failed write waits to be retried
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-pending:
		}
		pending = nil
		obj, exists, err := informer.GetStore().GetByKey(key)
		if err != nil || !exists {
			continue
		}
		written, err := m.write(obj.(*corev1.Secret))
		if err != nil {
			m.Log.Error(err, "writing the certificate files; retrying", "secret", key, "dir", m.Dir, "retryIn", retry)
			pending = time.After(retry)
			continue
		}
		if len(written) > 0 {
			m.Log.Info("certificate files written from the Secret", "secret", key, "dir", m.Dir, "files", written)
		}
	}
}

// write brings Dir's files up to date with the Secret and returns the keys it rewrote.
func (m *Mirror) write(s *corev1.Secret) ([]string, error) {
	var written []string
	for _, k := range m.Keys {
		value := s.Data[k]
		if len(value) == 0 {
			continue
		}
		path := filepath.Join(m.Dir, k)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, value) {
			continue
		}
		tmp := filepath.Join(m.Dir, "."+k+".tmp")
		if err := os.WriteFile(tmp, value, 0o600); err != nil {
			return written, fmt.Errorf("certfiles: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return written, fmt.Errorf("certfiles: %w", err)
		}
		written = append(written, k)
	}
	return written, nil
}
