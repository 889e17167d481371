package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"
	raftwal "github.com/hashicorp/raft-wal"
	raftfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"github.com/liftbridge-io/liftbridge/server/commitlog"
	rosewal "github.com/rosedblabs/wal"
	tidwal "github.com/tidwall/wal"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// A system is one log under test, opened on a directory. Every system
// gets the same records (value i: 100 bytes derived from i) in the same
// order; record i is the i-th appended, whatever the system calls it.
type system interface {
	// Append writes records [0, n) through the system's fastest honest
	// API, batch APIs where it has them; with syncEvery > 0 it makes them
	// durable (fsync) at least every syncEvery records. It runs sw only
	// while the system works: preparing each chunk of records is not timed.
	Append(n int64, syncEvery int64, sw *stopwatch) error
	// Read returns record i's value.
	Read(i int64) ([]byte, error)
	// Scan visits every record's value in order.
	Scan(fn func(v []byte)) error
	Close() error
}

// opener opens (creating or recovering) a system on dir.
type opener func(dir string) (system, error)

// systems are the logs compared, by name, with what a reader of the table
// should know about each.
var systems = []struct {
	name  string
	open  opener
	notes string
}{
	{"tierlog", openTierlog, "local.Backend, Kafka's default topic config (1 GiB segments); appends 16 KiB batches as a broker would; a read returns the batch holding the offset, which the harness decodes to the record"},
	{"rosedblabs/wal v1.3.8", openRose, "PendingWrites+WriteAll batches; the harness keeps a ChunkPosition per record (rosedb's index), 24 B each, counted in its RSS"},
	{"tidwall/wal v1.2.1 (in memory)", openTidwall, "WriteBatch; NoSync with explicit Sync; SegmentCacheSize set to hold every 20 MB segment, so reads are served from memory (its default of 2 reloads and parses a whole segment on most random reads: orders of magnitude slower)"},
	{"hashicorp/raft-wal v0.4.0", openRaftWAL, "StoreLogs; a segment filer whose files skip fsync unless the workload syncs (then StoreLogs of 1,000 records, one fsync each); bolt meta store closed by the harness"},
	{"liftbridge commitlog v1.9.0", openLiftbridge, "Append of message batches; reads through a Reader per position; no fsync API, so no durable-append figure"},
}

// pattern is what record values are cut from: 8 bytes of the record
// number, then 92 letters starting at a place the number picks.
var pattern = func() []byte {
	p := make([]byte, 128)
	for j := range p {
		p[j] = byte('a' + j%26)
	}
	return p
}()

// value fills buf with record i's 100-byte value.
func value(buf []byte, i int64) []byte {
	buf = buf[:100]
	binary.BigEndian.PutUint64(buf, uint64(i))
	copy(buf[8:], pattern[i%26:])
	return buf
}

// chunkRecords is how many records a system gets ready (untimed) before
// appending them (timed): the systems are timed on their own work, not
// the harness's, as a broker is handed batches a producer built. 8,192
// records (800 KiB of values) is about one produce request, whose bytes a
// broker appends while they are still in the CPU's cache, as here.
const chunkRecords = 8192

// stopwatch times only the appends.
type stopwatch struct {
	started time.Time
	total   time.Duration
}

func (w *stopwatch) start() { w.started = time.Now() }
func (w *stopwatch) stop()  { w.total += time.Since(w.started) }

// checkValue reports whether v is record i's value.
func checkValue(v []byte, i int64) error {
	if len(v) != 100 || binary.BigEndian.Uint64(v) != uint64(i) {
		return fmt.Errorf("record %d: read back %d bytes starting %x", i, len(v), v[:min(8, len(v))])
	}
	return nil
}

// ---- tierlog

type tierlogSys struct {
	b   *local.Backend
	l   *local.Log
	buf bytes.Buffer
	it  record.Iterator
	val []byte // the last value Read returned
}

func openTierlog(dir string) (system, error) {
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		return nil, err
	}
	l, err := b.OpenLog(context.Background(), "bench", 0, backend.DefaultConfig())
	if err != nil {
		b.Close()
		return nil, err
	}
	// Everything appended is replicated, as far as the harness knows.
	if err := l.SetHighWatermark(l.Offsets().LogEnd); err != nil {
		return nil, err
	}
	return &tierlogSys{b: b, l: l}, nil
}

func (s *tierlogSys) Append(n, syncEvery int64, sw *stopwatch) error {
	ctx := context.Background()
	var bl record.Builder
	buf := make([]byte, 100)
	var arena []byte // a chunk's batches, as a producer would send them
	var sizes []int  // their sizes
	var counts []int // their record counts
	var unsynced int64
	for i := int64(0); i < n; {
		arena, sizes, counts = arena[:0], sizes[:0], counts[:0]
		for end := min(n, i+chunkRecords); i < end; {
			bl.Reset(record.NewBatchHeader())
			for i < end {
				v := value(buf, i)
				if bl.NumRecords() > 0 && bl.SizeWith(0, nil, v, nil) > 16<<10 {
					break
				}
				bl.Append(1_700_000_000_000+i/1000, nil, v, nil)
				i++
			}
			batch, err := bl.Build()
			if err != nil {
				return err
			}
			arena = append(arena, batch...)
			sizes, counts = append(sizes, len(batch)), append(counts, bl.NumRecords())
		}
		sw.start()
		pos := 0
		for k, size := range sizes {
			info, err := s.l.Append(ctx, arena[pos:pos+size], backend.AppendOptions{AssignOffsets: true})
			if err != nil {
				return err
			}
			pos += size
			if err := s.l.SetHighWatermark(info.LastOffset + 1); err != nil {
				return err
			}
			if unsynced += int64(counts[k]); syncEvery > 0 && unsynced >= syncEvery {
				if err := s.l.Flush(); err != nil {
					return err
				}
				unsynced = 0
			}
		}
		if syncEvery > 0 && i == n {
			if err := s.l.Flush(); err != nil {
				return err
			}
		}
		sw.stop()
	}
	return nil
}

// batches reads the batches from offset on (up to maxBytes) into s.buf.
func (s *tierlogSys) batches(offset int64, maxBytes int) (int64, error) {
	r, err := s.l.Read(context.Background(), offset, backend.ReadOptions{MaxBytes: maxBytes, MinOneBatch: true})
	if err != nil {
		return 0, err
	}
	defer r.Close()
	s.buf.Reset()
	if _, err := r.WriteTo(&s.buf); err != nil {
		return 0, err
	}
	return r.(backend.OffsetRange).NextOffset(), nil
}

// Read decodes the record at offset i in place: the batch holding it is
// lent by Records.View (a sealed segment's read-only mapping, no copy),
// and the record's value copied out, as rosedb's Read returns a copy.
func (s *tierlogSys) Read(i int64) ([]byte, error) {
	r, err := s.l.Read(context.Background(), i, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var v []byte
	err = r.(backend.Viewer).View(func(p []byte) error {
		if err := s.it.Reset(record.Batch(p)); err != nil {
			return err
		}
		s.it.SkipTo(i)
		if s.it.Next() {
			if rec := s.it.Record(); rec.Offset == i {
				v = append(s.val[:0], rec.Value...)
				return nil
			}
		}
		return fmt.Errorf("tierlog: offset %d not in the batch read for it: %v", i, s.it.Err())
	})
	s.val = v
	return v, err
}

func (s *tierlogSys) Scan(fn func([]byte)) error {
	end := s.l.Offsets().LogEnd
	for off := int64(0); off < end; {
		next, err := s.batches(off, 1<<20)
		if err != nil {
			return err
		}
		data := s.buf.Bytes()
		for len(data) > 0 {
			b, err := record.Parse(data)
			if err != nil {
				return err
			}
			if err := s.it.Reset(b); err != nil {
				return err
			}
			for s.it.Next() {
				fn(s.it.Record().Value)
			}
			data = data[b.Size():]
		}
		off = next
	}
	return nil
}

func (s *tierlogSys) Close() error { return s.b.Close() }

// ---- rosedblabs/wal

type roseSys struct {
	w   *rosewal.WAL
	pos []rosewal.ChunkPosition // the harness's index: rosedb keeps none
}

// rosePositions survive a reopen within one child (rosedb's caller keeps
// them; they stay valid across a restart).
var rosePositions []rosewal.ChunkPosition

func openRose(dir string) (system, error) {
	w, err := rosewal.Open(rosewal.Options{DirPath: dir, SegmentSize: 1 << 30, SegmentFileExt: ".SEG"})
	if err != nil {
		return nil, err
	}
	return &roseSys{w: w, pos: rosePositions}, nil
}

func (s *roseSys) Append(n, syncEvery int64, sw *stopwatch) error {
	arena := make([]byte, chunkRecords*100)
	s.pos = make([]rosewal.ChunkPosition, 0, n)
	var unsynced int64
	for i := int64(0); i < n; {
		first, end := i, min(n, i+chunkRecords)
		for j := first; j < end; j++ {
			value(arena[(j-first)*100:], j)
		}
		sw.start()
		for i < end {
			for j := 0; j < 150 && i < end; j++ {
				s.w.PendingWrites(arena[(i-first)*100 : (i-first+1)*100])
				i++
				unsynced++
			}
			ps, err := s.w.WriteAll()
			if err != nil {
				return err
			}
			for _, p := range ps {
				s.pos = append(s.pos, *p)
			}
			if syncEvery > 0 && (unsynced >= syncEvery || i == n) {
				if err := s.w.Sync(); err != nil {
					return err
				}
				unsynced = 0
			}
		}
		sw.stop()
	}
	rosePositions = s.pos
	return nil
}

func (s *roseSys) Read(i int64) ([]byte, error) { return s.w.Read(&s.pos[i]) }

func (s *roseSys) Scan(fn func([]byte)) error {
	r := s.w.NewReader()
	for {
		v, _, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		fn(v)
	}
}

func (s *roseSys) Close() error { return s.w.Close() }

// ---- tidwall/wal

type tidSys struct{ l *tidwal.Log }

// tidwallSegments is how many segments the workload fills.
var tidwallSegments = 2

func openTidwall(dir string) (system, error) {
	opts := *tidwal.DefaultOptions
	opts.NoSync = true // the workload syncs explicitly
	opts.SegmentCacheSize = tidwallSegments
	l, err := tidwal.Open(dir, &opts)
	if err != nil {
		return nil, err
	}
	return &tidSys{l: l}, nil
}

func (s *tidSys) Append(n, syncEvery int64, sw *stopwatch) error {
	arena := make([]byte, chunkRecords*100)
	var b tidwal.Batch
	var unsynced int64
	for i := int64(0); i < n; {
		first, end := i, min(n, i+chunkRecords)
		for j := first; j < end; j++ {
			value(arena[(j-first)*100:], j)
		}
		sw.start()
		for i < end {
			b.Clear()
			for j := 0; j < 150 && i < end; j++ {
				b.Write(uint64(i+1), arena[(i-first)*100:(i-first+1)*100])
				i++
				unsynced++
			}
			if err := s.l.WriteBatch(&b); err != nil {
				return err
			}
			if syncEvery > 0 && (unsynced >= syncEvery || i == n) {
				if err := s.l.Sync(); err != nil {
					return err
				}
				unsynced = 0
			}
		}
		sw.stop()
	}
	return nil
}

func (s *tidSys) Read(i int64) ([]byte, error) { return s.l.Read(uint64(i + 1)) }

func (s *tidSys) Scan(fn func([]byte)) error {
	last, err := s.l.LastIndex()
	if err != nil {
		return err
	}
	for i := uint64(1); i <= last; i++ {
		v, err := s.l.Read(i)
		if err != nil {
			return err
		}
		fn(v)
	}
	return nil
}

func (s *tidSys) Close() error { return s.l.Close() }

// ---- hashicorp/raft-wal

// noSyncFS is raft-wal's file system with fsync skipped, for the
// page-cache append: raft-wal otherwise fsyncs inside every StoreLogs.
type noSyncFS struct{ *raftfs.FS }

type noSyncFile struct{ types.WritableFile }

func (noSyncFile) Sync() error { return nil }

func (f noSyncFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	w, err := f.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return noSyncFile{w}, nil
}

func (f noSyncFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	w, err := f.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{w}, nil
}

type raftSys struct {
	dir  string
	w    *raftwal.WAL
	meta *metadb.BoltMetaDB
	log  raft.Log
}

// raftSync says whether raft-wal's files fsync (the durable workload).
var raftSync bool

func openRaftWAL(dir string) (system, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var vfs types.VFS = raftfs.New()
	if !raftSync {
		vfs = noSyncFS{raftfs.New()}
	}
	meta := &metadb.BoltMetaDB{}
	w, err := raftwal.Open(dir, raftwal.WithSegmentFiler(segment.NewFiler(dir, vfs)), raftwal.WithMetaStore(meta))
	if err != nil {
		return nil, err
	}
	return &raftSys{dir: dir, w: w, meta: meta}, nil
}

func (s *raftSys) Append(n, syncEvery int64, sw *stopwatch) error {
	per := int64(150) // ~16 KiB, as tierlog's batches
	if syncEvery > 0 {
		per = syncEvery // one fsync per StoreLogs
	}
	arena := make([]byte, chunkRecords*100)
	store := make([]raft.Log, chunkRecords)
	logs := make([]*raft.Log, chunkRecords)
	for i := int64(0); i < n; {
		first, end := i, min(n, i+chunkRecords)
		for j := first; j < end; j++ {
			k := j - first
			store[k] = raft.Log{Index: uint64(j + 1), Term: 1, Type: raft.LogCommand, Data: value(arena[k*100:], j)}
			logs[k] = &store[k]
		}
		sw.start()
		for i < end {
			m := min(per, end-i)
			if err := s.w.StoreLogs(logs[i-first : i-first+m]); err != nil {
				return err
			}
			i += m
		}
		sw.stop()
	}
	return nil
}

func (s *raftSys) Read(i int64) ([]byte, error) {
	if err := s.w.GetLog(uint64(i+1), &s.log); err != nil {
		return nil, err
	}
	return s.log.Data, nil
}

func (s *raftSys) Scan(fn func([]byte)) error {
	last, err := s.w.LastIndex()
	if err != nil {
		return err
	}
	for i := uint64(1); i <= last; i++ {
		if err := s.w.GetLog(i, &s.log); err != nil {
			return err
		}
		fn(s.log.Data)
	}
	return nil
}

func (s *raftSys) Close() error {
	return errors.Join(s.w.Close(), s.meta.Close()) // its Close leaves the meta store open
}

// ---- liftbridge commitlog

type liftSys struct {
	l   commitlog.CommitLog
	hdr []byte
}

func openLiftbridge(dir string) (system, error) {
	l, err := commitlog.New(commitlog.Options{Name: "bench", Path: dir, MaxSegmentBytes: 1 << 30})
	if err != nil {
		return nil, err
	}
	return &liftSys{l: l, hdr: make([]byte, 28)}, nil
}

var errNoFsync = errors.New("no fsync API")

func (s *liftSys) Append(n, syncEvery int64, sw *stopwatch) error {
	if syncEvery > 0 {
		return errNoFsync
	}
	arena := make([]byte, chunkRecords*100)
	msgs := make([]commitlog.Message, chunkRecords)
	ptrs := make([]*commitlog.Message, chunkRecords)
	for i := int64(0); i < n; {
		first, end := i, min(n, i+chunkRecords)
		for j := first; j < end; j++ {
			k := j - first
			msgs[k] = commitlog.Message{Value: value(arena[k*100:], j), Timestamp: 1_700_000_000_000}
			ptrs[k] = &msgs[k]
		}
		sw.start()
		for i < end {
			m := min(150, end-i)
			if _, err := s.l.Append(ptrs[i-first : i-first+m]); err != nil {
				return err
			}
			i += m
		}
		sw.stop()
	}
	s.l.SetHighWatermark(s.l.NewestOffset())
	return nil
}

func (s *liftSys) Read(i int64) ([]byte, error) {
	r, err := s.l.NewReader(i, true)
	if err != nil {
		return nil, err
	}
	m, _, _, _, err := r.ReadMessage(context.Background(), s.hdr)
	if err != nil {
		return nil, err
	}
	return m.Value(), nil
}

func (s *liftSys) Scan(fn func([]byte)) error {
	n := s.l.NewestOffset() + 1
	r, err := s.l.NewReader(0, true)
	if err != nil {
		return err
	}
	for i := int64(0); i < n; i++ {
		m, _, _, _, err := r.ReadMessage(context.Background(), s.hdr)
		if err != nil {
			return err
		}
		fn(m.Value())
	}
	return nil
}

func (s *liftSys) Close() error { return s.l.Close() }
