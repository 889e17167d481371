package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// The bodies a Store hands drivers and callers: a get's, guarded against
// a server that stops sending and counted; a put's, whose reads are the
// put's progress.

// guardedBody is a get's body that cancels its request on Close, and when
// a Read makes no progress for idle (a server that sent headers and then
// went silent must not hang the reader).
type guardedBody struct {
	rc      io.ReadCloser
	cancel  context.CancelFunc
	idle    time.Duration
	timer   *time.Timer
	stalled atomic.Bool
}

func newGuardedBody(rc io.ReadCloser, cancel context.CancelFunc, idle time.Duration) *guardedBody {
	b := &guardedBody{rc: rc, cancel: cancel, idle: idle}
	b.timer = time.AfterFunc(idle, func() {
		b.stalled.Store(true)
		cancel()
	})
	b.timer.Stop()
	return b
}

func (b *guardedBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.idle)
	n, err := b.rc.Read(p)
	b.timer.Stop()
	if err != nil && err != io.EOF && b.stalled.Load() {
		err = fmt.Errorf("%w: the body stalled: no byte for %v: %w (%w)", ErrRetryable, b.idle, context.DeadlineExceeded, err)
	}
	return n, err
}

func (b *guardedBody) Close() error {
	b.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// countingReader counts body bytes and turns a body that breaks or ends
// before its length into a retryable error (a cut connection must never
// look like a short object).
type countingReader struct {
	rc   io.ReadCloser
	n    *atomic.Int64
	left int64  // bytes the body still owes
	what string // "get key on store", for errors
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.rc.Read(p)
	c.n.Add(int64(n))
	c.left -= int64(n)
	switch {
	case err == io.EOF && c.left > 0:
		err = fmt.Errorf("%w: %s: the body ended %d bytes early: %w", ErrRetryable, c.what, c.left, io.ErrUnexpectedEOF)
	case err == nil && c.left == 0 && n > 0:
		err = io.EOF
	case err != nil && err != io.EOF && (errors.Is(err, ErrRetryable) || errors.Is(err, ErrCorrupt)):
		// Retryable already, or bytes a layer over the driver found
		// wrong (objstore/seal): reading them again will not mend them.
		err = fmt.Errorf("%s: reading the body: %w", c.what, err)
	case err != nil && err != io.EOF:
		err = fmt.Errorf("%w: %s: reading the body: %w", ErrRetryable, c.what, err)
	}
	return n, err
}

func (c *countingReader) Close() error { return c.rc.Close() }

// progressBody returns body with progress called whenever the driver reads
// some of it: a put's body moving is a put making progress. It keeps the
// io.ReaderAt of a body that has one (drivers read parts in parallel).
func progressBody(body io.ReadSeeker, progress func()) io.ReadSeeker {
	pb := &progressReader{ReadSeeker: body, progress: progress}
	if at, ok := body.(io.ReaderAt); ok {
		return &progressReaderAt{progressReader: pb, at: at}
	}
	return pb
}

type progressReader struct {
	io.ReadSeeker
	progress func()
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.ReadSeeker.Read(p)
	if n > 0 {
		r.progress()
	}
	return n, err
}

type progressReaderAt struct {
	*progressReader
	at io.ReaderAt
}

func (r *progressReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.at.ReadAt(p, off)
	if n > 0 {
		r.progress()
	}
	return n, err
}
