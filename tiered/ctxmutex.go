package tiered

import (
	"context"
	"sync"
)

// ctxMutex is a mutex whose Lock gives up when ctx ends, for locks held
// across a request to the bucket. Its zero value is unlocked.
type ctxMutex struct {
	once sync.Once
	ch   chan struct{} // holds a token while locked
}

// Lock locks m, or returns ctx's error once it ends first.
func (m *ctxMutex) Lock(ctx context.Context) error {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock unlocks m, which Lock locked.
func (m *ctxMutex) Unlock() { <-m.ch }
