package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/tierlog/tierlog/objstore"
)

// fenceAttempts bounds how often Fence lists and tries again when the
// writer keeps taking the number it aimed at.
const fenceAttempts = 64

// ErrFenceRace: Fence lost the race for the writer's next sequence number
// fenceAttempts times in a row. Retryable.
var ErrFenceRace = errors.New("wal: the writer kept uploading ahead of the fence")

// Fence stops writer w from acknowledging anything more for tps, and
// returns the sequence number it fenced: every append of tps that w
// acknowledged lies in an object of w below it, and w fails every append
// of tps it had not settled. It puts a fence object, create-only, at the
// number after the highest of w's objects (listed from after, the last
// number the caller already knows of; 0 for all), and when w took that
// number first, lists again and aims at the next. epoch is the leader
// epoch the caller claims tps at (it is written into the fence, for the
// fenced writer's error).
//
// A writer that is gone (a broker that died) is fenced the same way: its
// next number is taken for good.
func Fence(ctx context.Context, store *objstore.Store, l Layout, w WriterID, after uint64, epoch int32, tps []TopicPartition) (uint64, error) {
	if len(tps) == 0 {
		return 0, fmt.Errorf("wal: a fence of writer %s names no partition", w)
	}
	highest := after
	for attempt := 0; attempt < fenceAttempts; attempt++ {
		if err := store.ListAfter(ctx, l.WriterPrefix(w), keyAfter(l, w, highest), func(info objstore.ObjectInfo) bool {
			if _, seq, err := l.Parse(info.Key); err == nil {
				highest = max(highest, seq)
			}
			return true
		}); err != nil {
			return 0, err
		}
		seq := highest + 1
		body, err := EncodeFence(Footer{Writer: w, Sequence: seq, CreatedMs: time.Now().UnixMilli(), FenceEpoch: epoch, Extents: extentsOf(tps)})
		if err != nil {
			return 0, err
		}
		key := l.Key(w, seq)
		_, err = store.Put(ctx, key, bytes.NewReader(body), int64(len(body)),
			objstore.PutOptions{IfNoneMatch: true, CRC32C: crc32.Checksum(body, castagnoli), HasCRC32C: true})
		if err == nil {
			return seq, nil
		}
		if !errors.Is(err, objstore.ErrPreconditionFailed) {
			return 0, fmt.Errorf("wal: fence %s: %w", key, err)
		}
		// Taken: by the writer, or by this fence's own earlier attempt
		// whose answer was lost (the store retries).
		mine, err := holds(ctx, store, key, body)
		if err != nil {
			return 0, fmt.Errorf("wal: fence %s: %w", key, err)
		}
		if mine {
			return seq, nil
		}
		highest = seq
	}
	return 0, fmt.Errorf("%w: writer %s, %d attempts", ErrFenceRace, w, fenceAttempts)
}

func keyAfter(l Layout, w WriterID, seq uint64) string {
	if seq == 0 {
		return ""
	}
	return l.Key(w, seq)
}

func extentsOf(tps []TopicPartition) []Extent {
	es := make([]Extent, len(tps))
	for i, tp := range tps {
		es[i] = Extent{TopicPartition: tp}
	}
	return es
}

// holds says whether the object at key is exactly body (read only when
// the sizes agree).
func holds(ctx context.Context, store *objstore.Store, key string, body []byte) (bool, error) {
	info, err := store.Head(ctx, key)
	if err != nil || info.Size != int64(len(body)) {
		return false, err
	}
	got, err := store.ReadAll(ctx, key, 0, info.Size)
	return bytes.Equal(got, body), err
}
