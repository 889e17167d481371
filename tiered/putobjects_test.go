package tiered_test

import (
	"bytes"
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

// lateDriver refuses every .index put, and holds each .log put until
// that refusal: a .log put cancelled meanwhile lands later, after the
// next Delete, as a server may finish an upload its client gave up on.
type lateDriver struct {
	objstore.Driver
	refused chan struct{} // closed at the first refused .index put
	once    sync.Once
	mu      sync.Mutex
	late    map[string][]byte // cancelled puts that land after the next Delete
}

func (d *lateDriver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	switch {
	case strings.HasSuffix(key, manifest.IndexSuffix):
		d.once.Do(func() { close(d.refused) })
		return objstore.ObjectInfo{}, errors.New("lateDriver: .index refused")
	case strings.HasSuffix(key, manifest.LogSuffix):
		<-d.refused
		if ctx.Err() != nil {
			data, err := io.ReadAll(body)
			if err != nil {
				return objstore.ObjectInfo{}, err
			}
			d.mu.Lock()
			d.late[key] = data
			d.mu.Unlock()
			return objstore.ObjectInfo{}, ctx.Err()
		}
	}
	return d.Driver.Put(ctx, key, body, size, opts)
}

func (d *lateDriver) Delete(ctx context.Context, keys []string) error {
	err := d.Driver.Delete(ctx, keys)
	d.mu.Lock()
	late := d.late
	d.late = map[string][]byte{}
	d.mu.Unlock()
	for key, data := range late {
		if _, err := d.Driver.Put(ctx, key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
			return err
		}
	}
	return err
}

// TestFailedPutLeavesNothing: when one of a segment's puts fails, the
// others are not cancelled but finish, so the abandoned upload's deletes
// come after them: nothing of the segment is left in the bucket, and the
// error is the failed put's.
func TestFailedPutLeavesNothing(t *testing.T) {
	d := &lateDriver{Driver: mem.New(), refused: make(chan struct{}), late: map[string][]byte{}}
	store := objstore.New(d, "mem://late", objstore.Options{})
	p := open(t, t.TempDir(), store, 1, cfg(t, "segment.bytes", "65536"))
	defer p.Close()
	produce(t, p, 2000)
	if _, err := p.Offload(ctx); err == nil || !strings.Contains(err.Error(), ".index refused") {
		t.Fatalf("offload: %v; want the refused .index put's error", err)
	}
	objs, _, err := d.Driver.List(ctx, "", "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if strings.Contains(o.Key, manifest.LogSuffix) || strings.HasSuffix(o.Key, ".intent") {
			t.Errorf("left in the bucket after the failed upload: %s", o.Key)
		}
	}
}
