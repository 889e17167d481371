package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
)

// diskless is the demo's step 11: a diskless topic on a tiered Backend
// over the demo's bucket. Its appends are acknowledged once a WAL object
// in the bucket holds them; then its log directory is removed, and a new
// Backend claims the partition and reads every record back from the
// bucket alone.
func (d *demo) diskless() error {
	w, ctx := d.w, d.ctx
	n := min(d.o.records, 20_000)
	fmt.Fprintf(w, "11. A diskless topic (diskless.enable=true): no disk to trust, the bucket is the replica\n")
	if d.store == nil {
		fmt.Fprintf(w, "   skipped: no bucket (the offload step opens it)\n\n")
		return nil
	}
	dir := filepath.Join(d.root, "diskless")
	cfg, err := backend.ParseConfig(map[string]string{"diskless.enable": "true", "segment.bytes": "1048576", "retention.ms": "-1"})
	if err != nil {
		return err
	}
	open := func(epoch int32) (*tiered.Backend, *tiered.Partition, error) {
		b, err := tiered.OpenBackend(dir, tiered.BackendOptions{Store: d.store})
		if err != nil {
			return nil, nil, err
		}
		p, err := b.Open(ctx, "events", 0, cfg)
		if err == nil {
			err = p.(*tiered.Partition).BecomeLeader(ctx, epoch)
		}
		if err != nil {
			b.Close()
			return nil, nil, err
		}
		return b, p.(*tiered.Partition), nil
	}
	b, p, err := open(1)
	if err != nil {
		return err
	}
	putsBefore := d.store.Stats().Requests["put"]
	var rb record.Builder
	val := bytes.Repeat([]byte("d"), 100)
	for done := 0; done < n; {
		rb.Reset(record.NewBatchHeader())
		for ; done < n && rb.NumRecords() < 100; done++ {
			rb.Append(1_700_000_000_000+int64(done), nil, val, nil)
		}
		batch, _ := rb.Build()
		if _, err := p.Append(ctx, append([]byte(nil), batch...), backend.AppendOptions{AssignOffsets: true}); err != nil {
			b.Close()
			return err
		}
		p.SetHighWatermark(p.Offsets().LogEnd)
	}
	if err := p.Flush(); err != nil {
		b.Close()
		return err
	}
	walObjs, err := tiered.ListWAL(ctx, d.store, "")
	if err != nil {
		b.Close()
		return err
	}
	fmt.Fprintf(w, "   %d records appended; the high watermark (what a broker acknowledges) reached %d once %d WAL object(s)\n",
		n, p.Offsets().HighWatermark, len(walObjs))
	fmt.Fprintf(w, "   held them (%d PUTs: at most one object a commit interval, shared by every diskless partition)\n",
		d.store.Stats().Requests["put"]-putsBefore)
	if err := b.Close(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	b, p, err = open(2)
	if err != nil {
		return err
	}
	defer b.Close()
	got, _, _, err := readEveryRecord(ctx, p, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   the log directory removed: a new Backend fenced the old writer, took the tail from its WAL objects,\n")
	fmt.Fprintf(w, "   and read back %d of %d records from the bucket alone (tierctl wal ls --store URL lists the objects)\n\n", got, n)
	d.sum.DisklessRecords, d.sum.DisklessRecordsBack, d.sum.DisklessWALObjects = n, int(got), len(walObjs)
	if got != int64(n) {
		d.bad++
	}
	return nil
}
