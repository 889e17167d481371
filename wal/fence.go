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
// of tps it had not settled. It lists w's objects (from after, the last
// number the caller already knows of; 0 for all) and puts fence objects,
// create-only, naming tps: one at every number missing among the
// MaxInFlight numbers up to the highest (an object w may still be
// putting: whichever lands first holds the number), and one at the
// number after the highest. When w took that number first, it lists
// again and goes on from there. epoch is the leader epoch the caller
// claims tps at (it is written into the fences, for the fenced writer's
// error and for Tail).
//
// Tail stops each partition at the first fence that names it, so a
// partition's tail below the returned number ends where w's acknowledged
// appends of it end: w acknowledges an append only once every lower
// number has settled, and a number a fence took fails every append of
// tps in the objects above it that w had in flight.
//
// A writer that is gone (a broker that died) is fenced the same way: its
// next number is taken for good.
func Fence(ctx context.Context, store *objstore.Store, l Layout, w WriterID, after uint64, epoch int32, tps []TopicPartition) (uint64, error) {
	if len(tps) == 0 {
		return 0, fmt.Errorf("wal: a fence of writer %s names no partition", w)
	}
	highest, listed := after, after
	for attempt := 0; attempt < fenceAttempts; attempt++ {
		// The numbers of the last MaxInFlight below the highest that
		// are there; the window starts past after and past what an
		// earlier round filled.
		from := listed
		have := map[uint64]bool{}
		if err := store.ListAfter(ctx, l.WriterPrefix(w), keyAfter(l, w, from), func(info objstore.ObjectInfo) bool {
			if _, seq, err := l.Parse(info.Key); err == nil && seq > from {
				highest = max(highest, seq)
				have[seq] = true
			}
			return true
		}); err != nil {
			return 0, err
		}
		low := max(from+1, highest+1-min(highest, MaxInFlight))
		for seq := low; seq <= highest; seq++ {
			if have[seq] {
				continue
			}
			if _, err := putFence(ctx, store, l, w, seq, epoch, tps); err != nil && !errors.Is(err, errTaken) {
				return 0, err
			}
		}
		listed = highest
		seq := highest + 1
		mine, err := putFence(ctx, store, l, w, seq, epoch, tps)
		if err == nil || mine {
			return seq, nil
		}
		if !errors.Is(err, errTaken) {
			return 0, err
		}
		highest = seq
	}
	return 0, fmt.Errorf("%w: writer %s, %d attempts", ErrFenceRace, w, fenceAttempts)
}

// errTaken: the number a fence aimed at holds another object.
var errTaken = errors.New("wal: the number is taken")

// putFence puts a fence naming tps at w's number seq, create-only. It
// returns nil when the fence is there (mine: this call's, whose answer
// may have been lost), errTaken when another object holds the number.
func putFence(ctx context.Context, store *objstore.Store, l Layout, w WriterID, seq uint64, epoch int32, tps []TopicPartition) (mine bool, err error) {
	body, err := EncodeFence(Footer{Writer: w, Sequence: seq, CreatedMs: time.Now().UnixMilli(), FenceEpoch: epoch, Extents: extentsOf(tps)})
	if err != nil {
		return false, err
	}
	key := l.Key(w, seq)
	_, err = store.Put(ctx, key, bytes.NewReader(body), int64(len(body)),
		objstore.PutOptions{IfNoneMatch: true, CRC32C: crc32.Checksum(body, castagnoli), HasCRC32C: true})
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, objstore.ErrPreconditionFailed) {
		return false, fmt.Errorf("wal: fence %s: %w", key, err)
	}
	// Taken: by the writer, or by this fence's own earlier attempt
	// whose answer was lost (the store retries).
	mine, err = holds(ctx, store, key, body)
	if err != nil {
		return false, fmt.Errorf("wal: fence %s: %w", key, err)
	}
	if mine {
		return true, nil
	}
	return false, errTaken
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
