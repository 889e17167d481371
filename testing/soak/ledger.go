package soak

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sort"

	"github.com/tierlog/tierlog/record"
)

// Ledger entry kinds (see the package doc).
const (
	kindBatchA   = 'a' // a batch of topic A as the log holds it
	kindBatchB   = 'b' // a batch of topic B, record by record
	kindBatchC   = 'c' // a batch of topic C, record by record
	kindFlushed  = 'f' // a flush returned: everything below end is acknowledged
	kindTruncate = 't' // recovery ended a topic below the ledger: forget the unflushed tail
	kindRestore  = 'r' // a restore of A from the bucket begins: A ends at end from now on
	kindRestored = 'R' // that restore is done
)

// Topics of the ledger's entries.
const (
	topicA byte = 'A'
	topicB byte = 'B'
	topicC byte = 'C'
)

// maxEntry caps a ledger entry's length before it sizes an allocation.
const maxEntry = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errLedger is a ledger that does not parse (a bug of the soak, never of
// tierlog: the ledger is written by the soak alone).
var errLedger = errors.New("soak: ledger")

// digest is the first 16 bytes of a SHA-256.
type digest [16]byte

func sum(b []byte) digest {
	s := sha256.Sum256(b)
	var d digest
	copy(d[:], s[:])
	return d
}

// recordDigest identifies a record by what a compacting cleaner keeps:
// timestamp, key, value (null or not) and headers.
func recordDigest(r *record.Record) digest {
	h := sha256.New()
	var b [8]byte
	put := func(p []byte, null bool) {
		n := int64(len(p))
		if null {
			n = -1
		}
		binary.BigEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
		h.Write(p)
	}
	binary.BigEndian.PutUint64(b[:], uint64(r.Timestamp))
	h.Write(b[:])
	put(r.Key, r.Key == nil)
	put(r.Value, r.Value == nil)
	binary.BigEndian.PutUint64(b[:], uint64(len(r.Headers)))
	h.Write(b[:])
	for _, hd := range r.Headers {
		put(hd.Key, false)
		put(hd.Value, hd.Value == nil)
	}
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// aBatch is one batch of topic A: its offsets and the digest of its bytes
// as the log holds them (offsets and leader epoch assigned).
type aBatch struct {
	base, last int64
	sum        digest
	records    int32
}

// modelA is what topic A must hold: its batches, contiguous from offset 0,
// and the acknowledged end.
type modelA struct {
	batches []aBatch
	flushed int64 // every batch below it was flushed, then acknowledged
}

func (m *modelA) end() int64 {
	if len(m.batches) == 0 {
		return 0
	}
	return m.batches[len(m.batches)-1].last + 1
}

// find returns the index of the batch holding offset, or -1.
func (m *modelA) find(offset int64) int {
	i := sort.Search(len(m.batches), func(i int) bool { return m.batches[i].last >= offset })
	if i == len(m.batches) || m.batches[i].base > offset {
		return -1
	}
	return i
}

// truncate forgets the batches at or above end and returns how many of
// their records were acknowledged and how many were not.
func (m *modelA) truncate(end int64) (acked, unacked int64) {
	i := sort.Search(len(m.batches), func(i int) bool { return m.batches[i].base >= end })
	for _, b := range m.batches[i:] {
		if b.last < m.flushed {
			acked += int64(b.records)
		} else {
			unacked += int64(b.records)
		}
	}
	m.batches = m.batches[:i]
	m.flushed = min(m.flushed, end)
	return acked, unacked
}

// bRecord is one record of a compacted topic (B or C).
type bRecord struct {
	key  int32
	tomb bool
	sum  digest
}

// modelB is what a compacted topic's records were (B's, or C's): by
// offset, and each key's writes in offset order.
type modelB struct {
	recs    map[int64]bRecord
	writes  map[int32][]int64
	end     int64 // one past the last record's batch
	flushed int64
}

func newModelB() *modelB {
	return &modelB{recs: map[int64]bRecord{}, writes: map[int32][]int64{}}
}

func (m *modelB) add(off int64, r bRecord) {
	m.recs[off] = r
	m.writes[r.key] = append(m.writes[r.key], off)
}

// truncate forgets the records at or above end and returns how many were
// acknowledged and how many not.
func (m *modelB) truncate(end int64) (acked, unacked int64) {
	for off, r := range m.recs {
		if off < end {
			continue
		}
		if off < m.flushed {
			acked++
		} else {
			unacked++
		}
		delete(m.recs, off)
		w := m.writes[r.key]
		i := sort.Search(len(w), func(i int) bool { return w[i] >= end })
		m.writes[r.key] = w[:i]
	}
	m.end = min(m.end, end)
	m.flushed = min(m.flushed, end)
	return acked, unacked
}

// pendingRestore is a restore of A (and, when the whole log dir is lost,
// of C) that began and has not ended.
type pendingRestore struct {
	end     int64
	variant byte
	endC    int64 // variant restoreLostLogDir: where the restored C ends
}

// ledger is the side file: the soak's record of what it wrote, appended
// and never rewritten. Batch entries are written with write(2) alone (a
// SIGKILL keeps them); entries that acknowledge (flushed, restore
// markers) are fsynced first.
type ledger struct {
	f   *os.File
	a   *modelA
	b   *modelB
	c   *modelB
	pr  *pendingRestore
	buf []byte
}

// openLedger reads the ledger at path, rebuilding the models, cuts a torn
// tail and opens it for appends.
func openLedger(path string) (_ *ledger, err error) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l := &ledger{a: &modelA{}, b: newModelB(), c: newModelB()}
	valid, err := l.replay(data)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := f.Truncate(int64(valid)); err != nil {
		return nil, err
	}
	if _, err := f.Seek(int64(valid), io.SeekStart); err != nil {
		return nil, err
	}
	l.f = f
	return l, nil
}

func (l *ledger) close() error { return l.f.Close() }

// replay applies the entries of data and returns the length of its valid
// prefix (a torn last entry is dropped).
func (l *ledger) replay(data []byte) (int, error) {
	pos := 0
	for pos+8 <= len(data) {
		n := int(binary.BigEndian.Uint32(data[pos:]))
		crc := binary.BigEndian.Uint32(data[pos+4:])
		if n == 0 || n > maxEntry || pos+8+n > len(data) || crc32.Checksum(data[pos+8:pos+8+n], castagnoli) != crc {
			break
		}
		if err := l.apply(data[pos+8 : pos+8+n]); err != nil {
			return 0, fmt.Errorf("%w: entry at %d: %w", errLedger, pos, err)
		}
		pos += 8 + n
	}
	return pos, nil
}

func (l *ledger) apply(p []byte) error {
	r := bytes.NewReader(p[1:])
	var err error
	i64 := func() int64 {
		var v int64
		if err == nil {
			err = binary.Read(r, binary.BigEndian, &v)
		}
		return v
	}
	i32 := func() int32 {
		var v int32
		if err == nil {
			err = binary.Read(r, binary.BigEndian, &v)
		}
		return v
	}
	dig := func() digest {
		var d digest
		if err == nil {
			_, err = io.ReadFull(r, d[:])
		}
		return d
	}
	switch p[0] {
	case kindBatchA:
		b := aBatch{base: i64(), last: i64(), sum: dig(), records: i32()}
		if err != nil {
			return err
		}
		if b.base != l.a.end() || b.last < b.base {
			return fmt.Errorf("batch %d..%d does not follow the ledger's end %d", b.base, b.last, l.a.end())
		}
		l.a.batches = append(l.a.batches, b)
	case kindBatchB, kindBatchC:
		m, topic := l.b, "B"
		if p[0] == kindBatchC {
			m, topic = l.c, "C"
		}
		base, last, n := i64(), i64(), i32()
		if err != nil {
			return err
		}
		if base < m.end || last < base {
			return fmt.Errorf("batch %d..%d of %s below the ledger's end %d", base, last, topic, m.end)
		}
		for range n {
			off, key := i64(), i32()
			tomb, _ := r.ReadByte()
			d := dig()
			if err != nil {
				return err
			}
			m.add(off, bRecord{key: key, tomb: tomb == 1, sum: d})
		}
		m.end = last + 1
	case kindFlushed:
		topic, _ := r.ReadByte()
		end := i64()
		if err != nil {
			return err
		}
		switch topic {
		case topicA:
			l.a.flushed = max(l.a.flushed, end)
		case topicB:
			l.b.flushed = max(l.b.flushed, end)
		case topicC:
			l.c.flushed = max(l.c.flushed, end)
		default:
			return fmt.Errorf("unknown topic %q", topic)
		}
	case kindTruncate:
		topic, _ := r.ReadByte()
		end := i64()
		if err != nil {
			return err
		}
		switch topic {
		case topicA:
			l.a.truncate(end)
		case topicB:
			l.b.truncate(end)
		case topicC:
			l.c.truncate(end)
		default:
			return fmt.Errorf("unknown topic %q", topic)
		}
	case kindRestore:
		end := i64()
		variant, _ := r.ReadByte()
		endC := int64(-1)
		if variant == restoreLostLogDir {
			endC = i64()
		}
		if err != nil {
			return err
		}
		l.a.truncate(end)
		if variant == restoreLostLogDir {
			l.b = newModelB() // B is lost with the log dir: not tiered, gone by design
			if endC != l.c.end {
				return fmt.Errorf("a restore of C to %d, but C ends at %d", endC, l.c.end)
			}
		}
		l.pr = &pendingRestore{end: end, variant: variant, endC: endC}
	case kindRestored:
		l.pr = nil
	default:
		return fmt.Errorf("unknown kind %q", p[0])
	}
	return nil
}

// write appends one entry (and applies it); with sync, fsyncs the file.
func (l *ledger) write(p []byte, sync bool) error {
	if err := l.apply(p); err != nil {
		return fmt.Errorf("%w: %w", errLedger, err)
	}
	l.buf = binary.BigEndian.AppendUint32(l.buf[:0], uint32(len(p)))
	l.buf = binary.BigEndian.AppendUint32(l.buf, crc32.Checksum(p, castagnoli))
	l.buf = append(l.buf, p...)
	if _, err := l.f.Write(l.buf); err != nil {
		return err
	}
	if sync {
		return l.f.Sync()
	}
	return nil
}

func appendI64(p []byte, v int64) []byte { return binary.BigEndian.AppendUint64(p, uint64(v)) }

// batchA records a batch of A as appended (bytes as the log holds them).
func (l *ledger) batchA(batch record.Batch) error {
	p := []byte{kindBatchA}
	p = appendI64(p, batch.BaseOffset())
	p = appendI64(p, batch.LastOffset())
	d := sum(batch)
	p = append(p, d[:]...)
	p = binary.BigEndian.AppendUint32(p, uint32(batch.NumRecords()))
	return l.write(p, false)
}

// batchKeyed records the records of a batch of a compacted topic (B or
// C) as appended.
func (l *ledger) batchKeyed(topic byte, batch record.Batch, key func(*record.Record) int32) error {
	p := []byte{kindBatchB}
	if topic == topicC {
		p[0] = kindBatchC
	}
	p = appendI64(p, batch.BaseOffset())
	p = appendI64(p, batch.LastOffset())
	p = binary.BigEndian.AppendUint32(p, 0) // the count, set below
	var it record.Iterator
	if err := it.Reset(batch); err != nil {
		return err
	}
	n := 0
	for it.Next() {
		r := it.Record()
		p = appendI64(p, r.Offset)
		p = binary.BigEndian.AppendUint32(p, uint32(key(r)))
		tomb := byte(0)
		if r.Value == nil {
			tomb = 1
		}
		p = append(p, tomb)
		d := recordDigest(r)
		p = append(p, d[:]...)
		n++
	}
	if err := it.Err(); err != nil {
		return err
	}
	binary.BigEndian.PutUint32(p[17:], uint32(n))
	return l.write(p, false)
}

// flushed acknowledges everything of topic below end, durably.
func (l *ledger) flushed(topic byte, end int64) error {
	return l.write(appendI64([]byte{kindFlushed, topic}, end), true)
}

// truncate forgets topic's records at or above end, durably.
func (l *ledger) truncate(topic byte, end int64) error {
	return l.write(appendI64([]byte{kindTruncate, topic}, end), true)
}

// restoreBegins records, durably, that A is about to be rebuilt from the
// bucket and will end at end (and, when the whole log dir is lost, C at
// endC).
func (l *ledger) restoreBegins(end int64, variant byte, endC int64) error {
	p := append(appendI64([]byte{kindRestore}, end), variant)
	if variant == restoreLostLogDir {
		p = appendI64(p, endC)
	}
	return l.write(p, true)
}

// restoreEnds records, durably, that the restore is done.
func (l *ledger) restoreEnds() error { return l.write([]byte{kindRestored}, true) }
