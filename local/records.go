package local

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/vfs"
)

// fileRecords is a region of a segment's .log returned by Read. It holds a
// reference to the segment, so the file stays open (and readable, even when
// retention renames or unlinks it) until Close.
type fileRecords struct {
	seg     *segFile
	f       vfs.File
	pos     int64
	n       int64
	next    int64                // one past the last offset returned
	aborted []backend.AbortedTxn // a read_committed read's
	once    sync.Once
}

// emptyRecords is what a read at its bound (or one asking for less than
// a batch) returns.
type emptyRecords struct{ next int64 }

func (emptyRecords) WriteTo(io.Writer) (int64, error)            { return 0, nil }
func (emptyRecords) Len() int64                                  { return 0 }
func (emptyRecords) Close() error                                { return nil }
func (e emptyRecords) NextOffset() int64                         { return e.next }
func (emptyRecords) View(fn func([]byte) error) error            { return fn(nil) }
func (emptyRecords) AbortedTransactions() []backend.AbortedTxn   { return nil }
func (r *fileRecords) AbortedTransactions() []backend.AbortedTxn { return r.aborted }

func (r *fileRecords) Len() int64 { return r.n }

// NextOffset is one past the last offset of the last batch returned.
func (r *fileRecords) NextOffset() int64 { return r.next }

var (
	_ backend.Viewer      = (*fileRecords)(nil)
	_ backend.Viewer      = emptyRecords{}
	_ backend.OffsetRange = (*fileRecords)(nil)
	_ backend.OffsetRange = emptyRecords{}
	_ backend.Aborted     = (*fileRecords)(nil)
	_ backend.Aborted     = emptyRecords{}
)

// Close releases the segment; it is idempotent.
func (r *fileRecords) Close() error {
	r.once.Do(func() { r.seg.release() })
	return nil
}

// WriteTo writes the region to w. To a TCP or Unix socket or an *os.File it
// uses sendfile(2): the bytes go from the page cache to the destination
// without entering the Go heap. To any other writer it copies through a
// SectionReader.
func (r *fileRecords) WriteTo(w io.Writer) (int64, error) {
	var sc syscall.Conn
	switch d := w.(type) {
	case *net.TCPConn:
		sc = d
	case *net.UnixConn:
		sc = d
	case *os.File:
		sc = d
	}
	if sc != nil {
		n, err, handled := sendfile(sc, r.f.OS(), r.pos, r.n)
		if handled {
			return n, err
		}
	}
	// A sealed segment's bytes are in its read-only mapping, which this
	// Records' reference keeps mapped: one copy, no system call.
	if m := r.seg.mapping(); m != nil && r.pos+r.n <= int64(len(m)) {
		return r.writeMapped(w, m[r.pos:r.pos+r.n])
	}
	// Anything else gets the bytes through one pread per MiB (io.Copy
	// would read once more to find the end).
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var written int64
	for written < r.n {
		chunk := buf[:min(int64(len(buf)), r.n-written)]
		m, err := r.f.ReadAt(chunk, r.pos+written)
		if m < len(chunk) && err == nil {
			err = io.ErrUnexpectedEOF
		}
		if m > 0 {
			k, werr := w.Write(chunk[:m])
			written += int64(k)
			if werr != nil {
				return written, werr
			}
		}
		if err != nil && !(err == io.EOF && m == len(chunk)) {
			return written, err
		}
	}
	return written, nil
}

// View lends the region in place: a sealed segment's bytes from its
// read-only mapping (which this Records' reference keeps mapped), others
// read with pread into a pooled buffer. See backend.Viewer.
func (r *fileRecords) View(fn func(p []byte) error) error {
	if m := r.seg.mapping(); m != nil && r.pos+r.n <= int64(len(m)) {
		return r.seg.readMapped(func() error { return fn(m[r.pos : r.pos+r.n : r.pos+r.n]) })
	}
	var buf []byte
	if r.n <= 1<<20 {
		bp := copyBufs.Get().(*[]byte)
		defer copyBufs.Put(bp)
		buf = (*bp)[:r.n]
	} else {
		buf = make([]byte, r.n)
	}
	if m, err := r.f.ReadAt(buf, r.pos); m < len(buf) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("local: %s: read %d bytes at %d: %w", r.seg.logPath, r.n, r.pos, err)
	}
	return fn(buf[:r.n:r.n])
}

// copyBufs hold the bytes of a WriteTo to a writer that is not a socket.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

// sendfile copies n bytes of src at pos to dst with sendfile(2). handled is
// false when sendfile is not possible for this pair (the caller copies).
func sendfile(dst syscall.Conn, src *os.File, pos, n int64) (written int64, err error, handled bool) {
	out, err := dst.SyscallConn()
	if err != nil {
		return 0, nil, false
	}
	in, err := src.SyscallConn()
	if err != nil {
		return 0, nil, false
	}
	var serr error
	cerr := in.Control(func(infd uintptr) {
		werr := out.Write(func(outfd uintptr) bool {
			for written < n {
				off := pos + written
				chunk := min(n-written, 1<<30)
				m, e := syscall.Sendfile(int(outfd), int(infd), &off, int(chunk))
				if m > 0 {
					written += int64(m)
				}
				switch {
				case e == syscall.EAGAIN:
					return false // wait until the socket is writable
				case e == syscall.EINTR:
					continue
				case e == syscall.EINVAL || e == syscall.ENOSYS:
					if written == 0 {
						serr = errNoSendfile
						return true
					}
					serr = fmt.Errorf("local: sendfile: %w", e)
					return true
				case e != nil:
					serr = fmt.Errorf("local: sendfile: %w", e)
					return true
				case m == 0:
					serr = fmt.Errorf("local: sendfile: %s ended %d bytes early (truncated under the reader): %w", src.Name(), n-written, io.ErrUnexpectedEOF)
					return true
				}
			}
			return true
		})
		if serr == nil && werr != nil {
			serr = werr
		}
	})
	if cerr != nil {
		return written, nil, false
	}
	if errors.Is(serr, errNoSendfile) {
		return 0, nil, false
	}
	return written, serr, true
}

var errNoSendfile = errors.New("sendfile not supported")

// writeMapped writes p, a slice of the segment's mapping, to w (a fault
// under the mapping is an error; see readMapped).
func (r *fileRecords) writeMapped(w io.Writer, p []byte) (n int64, err error) {
	err = r.seg.readMapped(func() error {
		k, werr := w.Write(p)
		n = int64(k)
		return werr
	})
	return n, err
}
