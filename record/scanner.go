package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ScanOptions tune a Scanner.
type ScanOptions struct {
	// Validate checks every entry (v2: Batch.Validate; legacy: CRC-32 and
	// layout) and stops at the first bad one with an ErrCorrupt error.
	Validate bool
	// HeadersOnly reads only the first BatchHeaderSize bytes of each entry;
	// Entry.Data then holds just those. Validate needs whole entries and
	// is ignored in this mode.
	HeadersOnly bool
	// Ordered checks that each entry's offsets rise strictly past the last
	// offset of the entry before it (Entry.Follows; the first entry's
	// need only be >= 0) and stops at the first that does not with an
	// ErrOffsetOrder error. It works in every mode.
	Ordered bool
	// BufferSize is the read window in bytes; 0 means 64 KiB. An entry
	// larger than the window is read whole into a larger buffer (unless
	// HeadersOnly).
	BufferSize int
}

// Entry is one log entry found by a Scanner: a v2 batch or a legacy entry.
type Entry struct {
	Position int64 // file position of the entry's first byte
	Size     int64 // bytes, including the 12-byte log overhead
	Magic    int8
	// BaseOffset is the first offset of a v2 batch or of an uncompressed
	// legacy entry; -1 for a compressed legacy wrapper (knowing it would
	// mean decompressing).
	BaseOffset int64
	// LastOffset is the last offset the entry holds.
	LastOffset int64
	// MaxTimestamp is a v2 batch's maxTimestamp, a magic 1 entry's
	// timestamp, or NoTimestamp for magic 0.
	MaxTimestamp int64
	// Data holds the entry's bytes (only the header with HeadersOnly). It
	// is valid until the next call to Next.
	Data []byte
}

// Follows reports whether the entry may come after an entry whose last
// offset is prevLast (-1: none, or unknown): its offsets must rise
// strictly past prevLast, and its last offset must not lie below its base.
// A legacy compressed wrapper, whose base is not known, needs only its last
// offset past prevLast. The base offset is outside a batch's CRC, so this
// is what catches one moved by any distance: every reader that walks a
// log's entries checks each one with it. The error is a *BatchError of
// kind ErrOffsetOrder at the entry's position.
func (e *Entry) Follows(prevLast int64) error {
	first := e.BaseOffset
	if first < 0 && e.Magic < 2 {
		first = e.LastOffset // a legacy compressed wrapper
	}
	if first > prevLast && e.LastOffset >= first {
		return nil
	}
	detail := fmt.Sprintf("offsets %d..%d after offset %d", e.BaseOffset, e.LastOffset, prevLast)
	if prevLast < 0 {
		detail = fmt.Sprintf("offsets %d..%d", e.BaseOffset, e.LastOffset)
	}
	return &BatchError{Kind: ErrOffsetOrder, Position: e.Position, BaseOffset: e.BaseOffset, Detail: detail}
}

// Holds reports whether an offset index entry naming offset agrees with
// the entry as the batch that ends the append it indexes: offset is its
// last offset, or, for a v2 batch, any offset of its span. Kafka's cleaner
// (before 3.8) keeps a thinned batch's last offset (overrideLastOffset)
// but indexes the chunk it appended by the last record it kept
// (FilterResult.maxOffset), so its entries may name an offset inside the
// batch that ends the chunk.
func (e *Entry) Holds(offset int64) bool {
	return e.LastOffset == offset || (e.Magic >= 2 && e.BaseOffset >= 0 && e.BaseOffset <= offset && offset < e.LastOffset)
}

// Batch returns Data as a v2 batch view; only meaningful when Magic is 2.
func (e *Entry) Batch() Batch { return Batch(e.Data) }

// Scanner walks the entries of a log file from a position, reading through
// an io.ReaderAt with a buffered window. It stops cleanly at the end, with
// ErrTornTail when the file ends inside an entry, and with an ErrCorrupt
// error when an entry's size or magic is impossible (or, with Validate, its
// CRC does not match). ValidEnd is then where a recovery truncates.
type Scanner struct {
	r    io.ReaderAt
	pos  int64 // start of the next entry
	end  int64
	opts ScanOptions

	buf      []byte
	bufStart int64 // file position of buf[0]
	bufLen   int

	entry    Entry
	prevLast int64 // Ordered: the last offset of the entry before the next
	err      error
}

// NewScanner returns a Scanner over r's bytes [start, end).
func NewScanner(r io.ReaderAt, start, end int64, opts ScanOptions) *Scanner {
	if opts.BufferSize <= 0 {
		opts.BufferSize = 64 << 10
	}
	if opts.BufferSize < BatchHeaderSize {
		opts.BufferSize = BatchHeaderSize
	}
	return &Scanner{r: r, pos: start, end: end, opts: opts, prevLast: -1}
}

// Entry returns the current entry; valid until the next call to Next.
func (s *Scanner) Entry() *Entry { return &s.entry }

// Err returns nil after a clean end, else why scanning stopped: a
// *BatchError matching ErrTornTail or ErrCorrupt, or an I/O error.
func (s *Scanner) Err() error { return s.err }

// ValidEnd is the position just past the last entry Next returned, the
// length a log keeps when recovery truncates a torn or corrupt tail.
func (s *Scanner) ValidEnd() int64 { return s.pos }

// Next advances to the next entry and reports whether there is one.
func (s *Scanner) Next() bool {
	if s.err != nil {
		return false
	}
	remaining := s.end - s.pos
	if remaining <= 0 {
		return false
	}
	if remaining < HeaderSizeToMagic {
		s.fail(ErrTornTail, -1, "%d bytes left, less than the %d-byte entry header", remaining, HeaderSizeToMagic)
		return false
	}
	hdr, err := s.window(s.pos, HeaderSizeToMagic)
	if err != nil {
		s.err = err
		return false
	}
	size, magic, base, err := frame(hdr, s.pos, remaining)
	if err != nil {
		s.err = err
		return false
	}
	want := size
	if s.opts.HeadersOnly && want > BatchHeaderSize {
		want = BatchHeaderSize
	}
	data, err := s.window(s.pos, int(want))
	if err != nil {
		s.err = err
		return false
	}
	e, err := describe(data, s.pos, size, magic, base, s.opts.Validate && !s.opts.HeadersOnly)
	if err == nil && s.opts.Ordered {
		err = e.Follows(s.prevLast)
	}
	if err != nil {
		s.err = err
		return false
	}
	s.entry, s.prevLast = e, e.LastOffset
	s.pos += size
	return true
}

// frame reads the size, magic and offset field of the entry whose first 17
// bytes are hdr, at pos with remaining bytes left in the file, and rejects
// impossible sizes and magics (corruption) and entries running past the end
// (a torn tail).
func frame(hdr []byte, pos, remaining int64) (size int64, magic int8, base int64, err error) {
	base = int64(binary.BigEndian.Uint64(hdr))
	length := int32(binary.BigEndian.Uint32(hdr[offLength:]))
	magic = int8(hdr[offMagic])
	fail := func(kind error, format string, args ...any) error {
		return &BatchError{Kind: kind, Position: pos, BaseOffset: base, Detail: fmt.Sprintf(format, args...)}
	}
	if length < MinLegacySize {
		return 0, 0, base, fail(ErrBadSize, "size field %d is below the minimum %d", length, MinLegacySize)
	}
	if magic < 0 || magic > 2 {
		return 0, 0, base, fail(ErrBadMagic, "magic %d", magic)
	}
	size = int64(length) + LogOverhead
	if magic == 2 && size < BatchHeaderSize {
		return 0, 0, base, fail(ErrBadSize, "batch of %d bytes is below the v2 minimum %d", size, BatchHeaderSize)
	}
	if size > remaining {
		return 0, 0, base, fail(ErrTornTail, "entry of %d bytes runs past the end (%d bytes left)", size, remaining)
	}
	return size, magic, base, nil
}

// describe fills an Entry from its bytes (the whole entry, or at least its
// fixed header), validating it when asked.
func describe(data []byte, pos, size int64, magic int8, base int64, validate bool) (Entry, error) {
	e := Entry{Position: pos, Size: size, Magic: magic, Data: data}
	if magic == 2 {
		b := Batch(data)
		if validate {
			if err := b.Validate(); err != nil {
				return e, AtPosition(err, pos)
			}
		}
		e.BaseOffset, e.LastOffset, e.MaxTimestamp = base, b.LastOffset(), b.MaxTimestamp()
		return e, nil
	}
	if len(data) < legacyHeaderV1 && magic == 1 || len(data) < legacyHeaderV0+8 {
		return e, &BatchError{Kind: ErrBadSize, Position: pos, BaseOffset: base,
			Detail: fmt.Sprintf("magic %d entry of %d bytes is too short", magic, size)}
	}
	le := LegacyEntry(data)
	if validate {
		if err := le.Validate(); err != nil {
			return e, AtPosition(err, pos)
		}
	}
	e.LastOffset, e.MaxTimestamp, e.BaseOffset = base, le.Timestamp(), -1
	if le.Codec() == None {
		e.BaseOffset = base
	}
	return e, nil
}

// HeaderAt describes the entry at pos of data, whose valid bytes end at
// end (a log held in memory or mapped), without copying: Data aliases data.
// Errors are the Scanner's; at end it returns io.EOF.
func HeaderAt(data []byte, pos, end int64) (Entry, error) {
	end = min(end, int64(len(data)))
	remaining := end - pos
	if remaining <= 0 {
		return Entry{}, io.EOF
	}
	if remaining < HeaderSizeToMagic {
		return Entry{}, &BatchError{Kind: ErrTornTail, Position: pos, BaseOffset: -1,
			Detail: fmt.Sprintf("%d bytes left, less than the %d-byte entry header", remaining, HeaderSizeToMagic)}
	}
	size, magic, base, err := frame(data[pos:], pos, remaining)
	if err != nil {
		return Entry{}, err
	}
	n := min(size, int64(BatchHeaderSize))
	return describe(data[pos:pos+n:pos+n], pos, size, magic, base, false)
}

// ReadHeader reads the header of the entry at pos of r, whose bytes end at
// end, with a single ReadAt into buf (at least BatchHeaderSize bytes), and
// describes it as a HeadersOnly Scanner would, with the same errors. It
// allocates nothing on success: the point lookups of a log use it.
// At end it returns io.EOF.
func ReadHeader(r io.ReaderAt, pos, end int64, buf []byte) (Entry, error) {
	remaining := end - pos
	if remaining <= 0 {
		return Entry{}, io.EOF
	}
	if remaining < HeaderSizeToMagic {
		return Entry{}, &BatchError{Kind: ErrTornTail, Position: pos, BaseOffset: -1,
			Detail: fmt.Sprintf("%d bytes left, less than the %d-byte entry header", remaining, HeaderSizeToMagic)}
	}
	n := int(min(int64(BatchHeaderSize), remaining))
	if got, err := r.ReadAt(buf[:n], pos); got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Entry{}, fmt.Errorf("record: read %d bytes at position %d: %w", n, pos, err)
	}
	size, magic, base, err := frame(buf, pos, remaining)
	if err != nil {
		return Entry{}, err
	}
	return describe(buf[:min(size, int64(n))], pos, size, magic, base, false)
}

func (s *Scanner) fail(kind error, base int64, format string, args ...any) {
	s.err = &BatchError{Kind: kind, Position: s.pos, BaseOffset: base, Detail: fmt.Sprintf(format, args...)}
}

// window returns the n bytes at pos, reading a new window when they are not
// already buffered. The caller has checked that pos+n <= s.end.
func (s *Scanner) window(pos int64, n int) ([]byte, error) {
	if pos >= s.bufStart && pos+int64(n) <= s.bufStart+int64(s.bufLen) {
		off := int(pos - s.bufStart)
		return s.buf[off : off+n : off+n], nil
	}
	want := n
	if want < s.opts.BufferSize {
		want = s.opts.BufferSize
	}
	if left := s.end - pos; int64(want) > left {
		want = int(left)
	}
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	s.buf = s.buf[:cap(s.buf)]
	got, err := s.r.ReadAt(s.buf[:want], pos)
	if got < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		s.bufLen = 0
		return nil, fmt.Errorf("record: read %d bytes at position %d: %w", n, pos, err)
	}
	s.bufStart, s.bufLen = pos, got
	return s.buf[:n:n], nil
}
