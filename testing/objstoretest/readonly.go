package objstoretest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// ErrReadOnly is what ReadOnly answers every write with.
var ErrReadOnly = errors.New("objstoretest: a write to a read-only bucket")

// ReadOnly wraps a driver for tests of code that must never write to a
// bucket (a read replica): every Put, Delete and AbortStaleUploads fails
// with ErrReadOnly and is recorded; reads and lists pass through.
type ReadOnly struct {
	objstore.Driver
	mu     sync.Mutex
	writes []string
}

func (d *ReadOnly) record(op, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes = append(d.writes, op+" "+key)
	return ErrReadOnly
}

// Put implements objstore.Driver: it fails and is recorded.
func (d *ReadOnly) Put(_ context.Context, key string, _ io.ReadSeeker, _ int64, _ objstore.PutOptions) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{}, d.record("put", key)
}

// Delete implements objstore.Driver: it fails and is recorded.
func (d *ReadOnly) Delete(_ context.Context, keys []string) error {
	return d.record("delete", fmt.Sprint(keys))
}

// AbortStaleUploads implements objstore.Driver: it fails and is recorded.
func (d *ReadOnly) AbortStaleUploads(_ context.Context, prefix string, _ time.Time) (int, error) {
	return 0, d.record("abort", prefix)
}

// Check fails the test if anything tried to write.
func (d *ReadOnly) Check(t testing.TB) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.writes) > 0 {
		t.Fatalf("the read replica wrote to the bucket: %v", d.writes)
	}
}
