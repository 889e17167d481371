package backend

import (
	"context"
	"fmt"
)

// WaitTieredEnd waits until p's TieredEnd passes offset (every offset
// from LogStart through offset is in the bucket, under a committed
// manifest) and returns the Offsets that showed it. It returns ctx's
// error when ctx ends first, the partition's error (ErrClosed) when it
// closes, and a *ConfigError naming remote.storage.enable at once for a
// partition without a bucket (TieredEnd -1), which would wait forever.
// It selects on Changed and reads Offsets; woken with nothing moved, it
// makes an empty Read at the log end to learn whether p closed.
func WaitTieredEnd(ctx context.Context, p Partition, offset int64) (Offsets, error) {
	var last Offsets
	for first := true; ; first = false {
		ch := p.Changed()
		o := p.Offsets()
		switch {
		case o.TieredEnd < 0:
			return o, &ConfigError{Key: "remote.storage.enable", Value: "false",
				Reason: fmt.Sprintf("the partition keeps nothing in a bucket: its tiered end never passes %d", offset)}
		case o.TieredEnd > offset:
			return o, nil
		case !first && o == last:
			// Woken with nothing moved: Changed fires at once on a
			// closed partition, whose Read says so.
			if err := closedErr(ctx, p, o.LogEnd); err != nil {
				return o, err
			}
		}
		last = o
		select {
		case <-ctx.Done():
			return o, fmt.Errorf("wait for the tiered end to pass %d (it is %d): %w", offset, o.TieredEnd, ctx.Err())
		case <-ch:
		}
	}
}

// closedErr is the error of an empty Read at the log end: ErrClosed on a
// closed partition, nil on an open one.
func closedErr(ctx context.Context, p Partition, logEnd int64) error {
	r, err := p.Read(ctx, logEnd, ReadOptions{MaxBytes: 1})
	if err != nil {
		return err
	}
	return r.Close()
}
