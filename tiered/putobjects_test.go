package tiered_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
)

// meetDriver holds each segment's .log put until a put of one of the
// segment's other objects has begun (or gives up after a while, failing
// the put): puts of a segment's objects one after another never meet.
type meetDriver struct {
	objstore.Driver
	mu     sync.Mutex
	others map[string]chan struct{} // segment name -> closed once another object's put began
	closed map[string]bool
}

// begun returns seg's channel; other says a put of one of its other
// objects begins, which closes it.
func (d *meetDriver) begun(seg string, other bool) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.others[seg]
	if !ok {
		c = make(chan struct{})
		d.others[seg] = c
	}
	if other && !d.closed[seg] {
		d.closed[seg] = true
		close(c)
	}
	return c
}

func (d *meetDriver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	name := key[strings.LastIndex(key, "/")+1:]
	seg, suf, ok := strings.Cut(name, ".")
	if ok && strings.Count(seg, "-") == 2 { // a segment's object
		c := d.begun(seg, "."+suf != manifest.LogSuffix)
		if "."+suf == manifest.LogSuffix {
			select {
			case <-c:
			case <-time.After(20 * time.Second):
				return objstore.ObjectInfo{}, errors.New("meetDriver: the segment's .log put waited for its other objects' puts, which did not begin")
			case <-ctx.Done():
				return objstore.ObjectInfo{}, ctx.Err()
			}
		}
	}
	return d.Driver.Put(ctx, key, body, size, opts)
}

// TestSegmentObjectsPutTogether: a segment's .log and its other objects
// (indexes, producer snapshot, leader epochs) are put at once, not one
// after another (five round trips each, where one would do).
func TestSegmentObjectsPutTogether(t *testing.T) {
	d := &meetDriver{Driver: mem.New(), others: map[string]chan struct{}{}, closed: map[string]bool{}}
	store := objstore.New(d, "mem://together", objstore.Options{})
	p := open(t, t.TempDir(), store, 1, cfg(t, "segment.bytes", "65536"))
	defer p.Close()
	produce(t, p, 2000)
	n, err := p.Offload(ctx)
	if err != nil {
		t.Fatalf("offload: %v", err)
	}
	if n < 2 {
		t.Fatalf("offloaded %d segments; want several", n)
	}
}
