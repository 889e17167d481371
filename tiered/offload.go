package tiered

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"
	"time"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/record"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Offload uploads, in offset order, every closed local segment that lies
// wholly below the high watermark and that the manifest does not name yet,
// up to UploadConcurrency segments at a time, committing the manifest once
// per group (a group that fails part-way commits the segments before the
// failure); then it applies local retention (local.retention.ms/bytes) to
// segments a committed manifest names. It returns how many segments it
// uploaded.
func (p *Partition) Offload(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.reconcileLocked(ctx); err != nil {
		return 0, err
	}
	pending, err := p.pendingLocked()
	if err != nil {
		return 0, err
	}
	n := 0
	for len(pending) > 0 {
		group := pending[:min(len(pending), p.opts.UploadConcurrency)]
		pending = pending[len(group):]
		segs := make([]manifest.Segment, len(group))
		errs := make([]error, len(group))
		var wg sync.WaitGroup
		for i, si := range group {
			wg.Add(1)
			go func(i int, si local.SegmentInfo) {
				defer wg.Done()
				start := time.Now()
				segs[i], errs[i] = p.upload(ctx, si)
				if errs[i] != nil {
					p.metrics.UploadErrors.Add(1)
					return
				}
				p.metrics.SegmentsUploaded.Add(1)
				p.metrics.BytesUploaded.Add(segs[i].Size + segs[i].IndexSize + segs[i].TimeIndexSize)
				p.metrics.UploadLatency.Since(start)
			}(i, si)
		}
		wg.Wait()
		ok := 0
		for ok < len(group) && errs[ok] == nil {
			ok++
		}
		if ok > 0 {
			st := p.man.Load()
			next := *st.m
			next.Segments = append(append([]manifest.Segment(nil), st.m.Segments...), segs[:ok]...)
			if len(st.m.Segments) == 0 {
				next.LogStartOffset = max(segs[0].BaseOffset, p.local.Offsets().LogStart)
			}
			if err := p.commitLocked(ctx, st, &next); err != nil {
				return n, err
			}
			for _, seg := range segs[:ok] {
				p.opts.Logger.Info("offloaded segment", "base", seg.BaseOffset, "last", seg.LastOffset, "bytes", seg.Size)
			}
			n += ok
		}
		if ok < len(group) {
			return n, errs[ok]
		}
	}
	return n, p.applyLocalRetentionLocked(ctx)
}

// pendingLocked lists the closed local segments below the high watermark
// that the manifest does not name yet, in offset order.
// REQUIRES: p.mu held.
func (p *Partition) pendingLocked() ([]local.SegmentInfo, error) {
	m := p.Manifest()
	lastRemote := int64(-1)
	if k := len(m.Segments); k > 0 {
		lastRemote = m.Segments[k-1].LastOffset
	}
	hw := p.local.Offsets().HighWatermark
	var out []local.SegmentInfo
	for _, si := range p.local.SegmentInfos() {
		if si.Active || si.NextOffset > hw {
			break
		}
		if si.NextOffset-1 <= lastRemote {
			continue // uploaded already
		}
		if si.BaseOffset <= lastRemote {
			return nil, fmt.Errorf("tiered: local segment %d..%d overlaps the bucket, which ends at %d", si.BaseOffset, si.NextOffset-1, lastRemote)
		}
		out = append(out, si)
	}
	return out, nil
}

// CopyLag returns how many closed segments below the high watermark, and
// how many bytes of them, are not in the bucket yet. It takes no lock (an
// Offload in progress does not hold it up) and allocates nothing, so a
// metrics scrape over many partitions stays cheap.
func (p *Partition) CopyLag() (segments int, bytes int64) {
	m := p.Manifest()
	lastRemote := int64(-1)
	if k := len(m.Segments); k > 0 {
		lastRemote = m.Segments[k-1].LastOffset
	}
	hw := p.local.Offsets().HighWatermark
	for s := range p.local.Spans() {
		if s.Active || s.NextOffset > hw {
			break
		}
		if s.NextOffset-1 > lastRemote {
			segments++
			bytes += s.Size
		}
	}
	return segments, bytes
}

// upload puts one closed segment's .log, .index and .timeindex under new
// keys and returns its manifest entry. The segment is not visible to
// readers until a manifest naming it is committed.
func (p *Partition) upload(ctx context.Context, si local.SegmentInfo) (manifest.Segment, error) {
	seg := manifest.Segment{BaseOffset: si.BaseOffset, LastOffset: si.NextOffset - 1, UploadTimeMs: p.opts.Now().UnixMilli(), MaxTimestamp: -1}
	if _, err := rand.Read(seg.ID[:]); err != nil {
		return seg, err
	}
	idx, err := os.ReadFile(si.IndexPath)
	if err != nil {
		return seg, fmt.Errorf("tiered: %w", err)
	}
	tidx, err := os.ReadFile(si.TimeIndexPath)
	if err != nil {
		return seg, fmt.Errorf("tiered: %w", err)
	}
	// Trimmed files: whole entries only (a closed segment's always are).
	idx = idx[:len(idx)/index.OffsetEntrySize*index.OffsetEntrySize]
	tidx = tidx[:len(tidx)/index.TimeEntrySize*index.TimeEntrySize]
	if t := index.NewTimeIndexView(tidx, si.BaseOffset); t.Entries() > 0 {
		seg.MaxTimestamp = t.LastEntry().Timestamp
	}
	f, err := os.Open(si.Path)
	if err != nil {
		return seg, fmt.Errorf("tiered: %w", err)
	}
	defer f.Close()
	// One pass over the log: its CRC-32C, record count, epoch and largest
	// timestamp (when the time index has none).
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, si.Size)); err != nil {
		return seg, fmt.Errorf("tiered: read %s: %w", si.Path, err)
	}
	seg.LogCRC = h.Sum32()
	sc := record.NewScanner(f, 0, si.Size, record.ScanOptions{HeadersOnly: true})
	for sc.Next() {
		e := sc.Entry()
		if e.Magic == 2 {
			b := e.Batch()
			seg.Records += int64(b.NumRecords())
			seg.LeaderEpoch = max(seg.LeaderEpoch, b.PartitionLeaderEpoch())
		} else {
			seg.Records++
		}
		seg.MaxTimestamp = max(seg.MaxTimestamp, e.MaxTimestamp)
	}
	if err := sc.Err(); err != nil {
		return seg, fmt.Errorf("tiered: %s: %w", si.Path, err)
	}
	seg.Size, seg.IndexSize, seg.TimeIndexSize = si.Size, int64(len(idx)), int64(len(tidx))
	seg.IndexCRC, seg.TimeIndexCRC = crc32.Checksum(idx, castagnoli), crc32.Checksum(tidx, castagnoli)
	if seg.Size == 0 {
		return seg, fmt.Errorf("tiered: %s is empty", si.Path)
	}
	put := func(name string, body io.ReadSeeker, size int64, crc uint32) error {
		_, err := p.store.Put(ctx, p.key(name), body, size, objstore.PutOptions{CRC32C: crc, HasCRC32C: true, IfNoneMatch: true})
		if errors.Is(err, objstore.ErrPreconditionFailed) {
			// The key is new to this attempt: if it exists, an earlier try
			// of this very put succeeded before its answer was lost.
			info, herr := p.store.Head(ctx, p.key(name))
			if herr == nil && info.Size == size {
				return nil
			}
			if herr != nil {
				return fmt.Errorf("tiered: upload %s: %w: its outcome is unknown (%v)", name, objstore.ErrRetryable, herr)
			}
		}
		if err != nil {
			return fmt.Errorf("tiered: upload %s: %w", name, err)
		}
		return nil
	}
	var body io.ReadSeeker = io.NewSectionReader(f, 0, si.Size)
	if p.opts.OnUploadProgress != nil {
		body = &progressBody{rs: body, report: p.opts.OnUploadProgress}
	}
	if p.uploadRate != nil {
		body = &limitedBody{ctx: ctx, rs: body, lim: p.uploadRate}
	}
	if err := put(seg.Name(manifest.LogSuffix), body, si.Size, seg.LogCRC); err != nil {
		return seg, err
	}
	if err := put(seg.Name(manifest.IndexSuffix), bytes.NewReader(idx), int64(len(idx)), seg.IndexCRC); err != nil {
		return seg, err
	}
	if err := put(seg.Name(manifest.TimeIndexSuffix), bytes.NewReader(tidx), int64(len(tidx)), seg.TimeIndexCRC); err != nil {
		return seg, err
	}
	// Warm the index cache: the first remote read needs it.
	p.indexes.put(p.key(seg.Name(manifest.IndexSuffix)), idx)
	p.indexes.put(p.key(seg.Name(manifest.TimeIndexSuffix)), tidx)
	return seg, nil
}

// applyLocalRetentionLocked deletes local copies of segments a committed
// manifest names, oldest first, while local.retention.ms (by the segment's
// largest timestamp) or local.retention.bytes says so. It never touches a
// segment the bucket does not hold. REQUIRES: p.mu held.
func (p *Partition) applyLocalRetentionLocked(ctx context.Context) error {
	cfg := p.local.Config()
	ms, maxBytes := cfg.EffectiveLocalRetentionMs(), cfg.EffectiveLocalRetentionBytes()
	m := p.Manifest()
	if len(m.Segments) == 0 || (ms < 0 && maxBytes < 0) {
		return nil
	}
	lastRemote := m.Segments[len(m.Segments)-1].LastOffset
	infos := p.local.SegmentInfos()
	var total int64
	for _, si := range infos {
		total += si.Size
	}
	now := p.opts.Now().UnixMilli()
	cut := int64(-1)
	for _, si := range infos {
		if si.Active || si.NextOffset-1 > lastRemote {
			break
		}
		del := false
		if ms >= 0 {
			if i, ok := m.Find(si.BaseOffset); ok && now-m.Segments[i].MaxTimestamp > ms {
				del = true
			}
		}
		if maxBytes >= 0 && total-si.Size >= maxBytes {
			del = true
		}
		if !del {
			break
		}
		total -= si.Size
		cut = si.NextOffset
	}
	if cut < 0 {
		return nil
	}
	return p.local.DeleteRecordsBefore(ctx, cut)
}
