package soak

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// journalDriver records every Put and Delete a child sends the bucket,
// and its answer, one line each in the run's journal (journalFile in the
// work dir, shared by every life, appended to), so that a failure over
// an object the bucket no longer holds says who wrote or removed it and
// when. Reads are not journaled.
type journalDriver struct {
	objstore.Driver
	life int
	mu   sync.Mutex
	f    *os.File
}

// journalFile is the journal's name in the work dir.
const journalFile = "store-journal.txt"

func newJournalDriver(d objstore.Driver, path string, life int) (*journalDriver, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("soak: the bucket journal %q is not in a work dir", path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &journalDriver{Driver: d, life: life, f: f}, nil
}

func (j *journalDriver) note(op, what string, began time.Time, err error) {
	res := "ok"
	if err != nil {
		res = err.Error()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	fmt.Fprintf(j.f, "%s life=%d %s %s took=%v: %s\n", began.UTC().Format("15:04:05.000000"), j.life, op, what, time.Since(began).Round(time.Millisecond), res)
}

func (j *journalDriver) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, opts objstore.PutOptions) (objstore.ObjectInfo, error) {
	began := time.Now()
	info, err := j.Driver.Put(ctx, key, body, size, opts)
	j.note("put", fmt.Sprintf("%s size=%d opts=%+v etag=%s", key, size, opts, info.ETag), began, err)
	return info, err
}

func (j *journalDriver) Delete(ctx context.Context, keys []string) error {
	began := time.Now()
	err := j.Driver.Delete(ctx, keys)
	j.note("delete", strings.Join(keys, " "), began, err)
	return err
}

func (j *journalDriver) Close() error {
	err := j.Driver.Close()
	j.mu.Lock()
	j.f.Close()
	j.mu.Unlock()
	return err
}

// journalLines returns the journal's lines that name key (all of them
// when key is empty), the last max at most.
func journalLines(path, key string, max int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" && (key == "" || strings.Contains(l, key)) {
			out = append(out, l)
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return strings.Join(out, "\n")
}
