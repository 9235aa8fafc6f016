// Package cutstore wraps a lock.Store with a switch that cuts it off, as if the process lost its
// network (or died): while cut, every call blocks until its context ends and then fails. Tests and
// the demo use it to stop a holder from renewing without releasing.
package cutstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/lock"
)

// ErrCut is returned by calls made while the store is cut off.
var ErrCut = errors.New("cutstore: store cut off")

// Store is a lock.Store with a cut-off switch.
type Store struct {
	inner lock.Store
	cut   atomic.Bool
}

var _ lock.Store = (*Store)(nil)

// New wraps inner.
func New(inner lock.Store) *Store { return &Store{inner: inner} }

// Cut turns the cut-off on or off.
func (s *Store) Cut(on bool) { s.cut.Store(on) }

func (s *Store) blocked(ctx context.Context) error {
	if !s.cut.Load() {
		return nil
	}
	<-ctx.Done()
	return ErrCut
}

// Load implements lock.Store.
func (s *Store) Load(ctx context.Context, id string, linearizable bool) (lock.Record, bool, error) {
	if err := s.blocked(ctx); err != nil {
		return lock.Record{}, false, err
	}
	return s.inner.Load(ctx, id, linearizable)
}

// CompareAndSwap implements lock.Store.
func (s *Store) CompareAndSwap(ctx context.Context, id string, prev, next lock.Record) (bool, lock.Record, bool, error) {
	if err := s.blocked(ctx); err != nil {
		return false, lock.Record{}, false, err
	}
	return s.inner.CompareAndSwap(ctx, id, prev, next)
}

// Enqueue implements lock.Store.
func (s *Store) Enqueue(ctx context.Context, id string, e lock.QueueEntry, ttl time.Duration) error {
	if err := s.blocked(ctx); err != nil {
		return err
	}
	return s.inner.Enqueue(ctx, id, e, ttl)
}

// Dequeue implements lock.Store.
func (s *Store) Dequeue(ctx context.Context, id string, e lock.QueueEntry) error {
	if err := s.blocked(ctx); err != nil {
		return err
	}
	return s.inner.Dequeue(ctx, id, e)
}

// Queue implements lock.Store.
func (s *Store) Queue(ctx context.Context, id string, from int64, limit int) ([]lock.QueueEntry, error) {
	if err := s.blocked(ctx); err != nil {
		return nil, err
	}
	return s.inner.Queue(ctx, id, from, limit)
}
