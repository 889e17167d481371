package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// The shapes a broker hands tierlog, measured in one child process
// ("broker"), each beside a raw baseline of the same bytes or the same
// work on one partition:
//
//   - produce-shaped append: each Append carries requestBatches 16 KiB
//     batches of one partition, as a produce request does;
//   - the same work spread over manyPartitions partitions of one Backend
//     by appendGoroutines goroutines (a broker's request handlers), with
//     and without a Flush per request;
//   - flush.messages=1: a partition that fsyncs every append;
//   - fetch-shaped reads: fetchConsumers consumers at random positions,
//     each Read of up to 1 MiB written to a loopback socket, beside
//     sendfile(2) of the same file ranges by as many goroutines.
const (
	requestBatches   = 4
	manyPartitions   = 1000
	appendGoroutines = 8
	fetchConsumers   = 64
	fetchMaxBytes    = 1 << 20
	// ringBytes is how many bytes of prepared requests the appenders walk
	// (split between them), as the raw baseline walks a 64 MiB buffer:
	// rewriting a few cache-hot requests would flatter the appends.
	ringBytes = 64 << 20
)

// The durable workloads fsync every request or every batch, so they run
// on a part of the log's bytes: their rate is set by the fsyncs, and
// fsyncing the whole gigabyte 16 KiB at a time would take minutes.
const (
	flushRequestShare = 8  // Flush per request: n/8 records
	flushEveryShare   = 16 // flush.messages=1: n/16 records
)

// request is one partition's part of a produce request: whole batches,
// where each starts, and how many records they carry.
type request struct {
	batches []byte
	starts  []int
	records int
}

// produced returns the request's batches as a producer sends them: a
// leader's Append rewrites base offsets in place, so a request appended
// before gets its base offsets set back to 0 (the field is outside the
// CRC; 8 bytes a 16 KiB batch).
func (r request) produced() []byte {
	for _, s := range r.starts {
		record.Batch(r.batches[s:]).SetBaseOffset(0)
	}
	return r.batches
}

// buildRequests prepares requests of perRequest 16 KiB batches of
// 100-byte values until they hold about ringBytes/rings bytes, for each
// of rings appenders.
func buildRequests(rings, perRequest int) [][]request {
	var bl record.Builder
	buf := make([]byte, 100)
	ts := time.Now().UnixMilli()
	out := make([][]request, rings)
	i := int64(0)
	for g := range out {
		for size := 0; size < ringBytes/rings; {
			var req request
			for range perRequest {
				bl.Reset(record.NewBatchHeader())
				for {
					v := value(buf, i)
					if bl.NumRecords() > 0 && bl.SizeWith(ts, nil, v, nil) > 16<<10 {
						break
					}
					bl.Append(ts, nil, v, nil)
					i++
				}
				batch, err := bl.Build()
				if err != nil {
					panic(err) // a builder of fixed-size values cannot fail
				}
				req.starts = append(req.starts, len(req.batches))
				req.batches = append(req.batches, batch...)
				req.records += bl.NumRecords()
			}
			out[g] = append(out[g], req)
			size += len(req.batches)
		}
	}
	return out
}

// appendResult is what appendWork measured: MB/s of values over the wall
// time, and the latency of each call (Append, with its Flush if any).
type appendResult struct {
	mbps, p50us, p99us float64
}

// appendWork appends records (n 100-byte values in all) to logs from
// len(rings) goroutines: goroutine g takes logs g, g+G, g+2G, ... in
// turn, one request of its ring per call, so no two goroutines append to
// one partition. With flush, each request is followed by the partition's
// Flush, as a broker with flush.messages=1 or acks waiting on an fsync
// does.
func appendWork(logs []*local.Log, rings [][]request, n int64, flush bool) (appendResult, error) {
	ctx := context.Background()
	G := len(rings)
	lats := make([][]time.Duration, G)
	errs := make([]error, G)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range G {
		wg.Go(func() {
			<-start
			share := n / int64(G)
			mine := logs[min(g, len(logs)-1):]
			k, p := 0, 0
			for done := int64(0); done < share; {
				l := mine[p]
				if p += G; p >= len(mine) {
					p = 0
				}
				req := rings[g][k]
				if k++; k == len(rings[g]) {
					k = 0
				}
				batches := req.produced()
				t := time.Now()
				info, err := l.Append(ctx, batches, backend.AppendOptions{AssignOffsets: true})
				if err == nil {
					err = l.SetHighWatermark(info.LastOffset + 1)
				}
				if err == nil && flush {
					err = l.Flush()
				}
				lats[g] = append(lats[g], time.Since(t))
				if err != nil {
					errs[g] = err
					return
				}
				done += int64(req.records)
			}
		})
	}
	t := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t)
	for _, err := range errs {
		if err != nil {
			return appendResult{}, err
		}
	}
	all := slices.Concat(lats...)
	p50, p99 := percentiles(all)
	return appendResult{mbps: payloadMB(n) / took.Seconds(), p50us: p50, p99us: p99}, nil
}

// percentiles returns the p50 and p99 of ds in µs (ds is sorted).
func percentiles(ds []time.Duration) (p50, p99 float64) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	return us(ds[len(ds)/2]), us(ds[len(ds)*99/100])
}

// openLogs opens count partitions of topic in b with cfg.
func openLogs(b *local.Backend, topic string, count int, cfg backend.Config) ([]*local.Log, error) {
	var logs []*local.Log
	for p := range count {
		l, err := b.OpenLog(context.Background(), topic, int32(p), cfg)
		if err != nil {
			return nil, err
		}
		logs = append(logs, l)
	}
	return logs, nil
}

// warm appends one request to each log and flushes it, untimed: a
// broker's partitions exist and hold data before the traffic measured
// (the first append creates the segment's files).
func warm(logs []*local.Log, req request) error {
	for _, l := range logs {
		info, err := l.Append(context.Background(), req.produced(), backend.AppendOptions{AssignOffsets: true})
		if err != nil {
			return err
		}
		if err := l.SetHighWatermark(info.LastOffset + 1); err != nil {
			return err
		}
		if err := l.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// runBroker measures the broker shapes on n records' worth of values.
func runBroker(dir string, n int64, consumers, fetches int) (result, error) {
	res := result{System: "tierlog, broker shapes", Values: map[string]float64{}}
	defer os.RemoveAll(dir)
	put := func(key string, r appendResult) {
		res.Values[key+"MBps"], res.Values[key+"P50us"], res.Values[key+"P99us"] = r.mbps, r.p50us, r.p99us
	}

	// One partition, produce-shaped appends, page cache.
	one, err := local.OpenBackend(filepath.Join(dir, "one"), local.BackendOptions{})
	if err != nil {
		return res, err
	}
	defer one.Close()
	cfg := backend.DefaultConfig()
	logs, err := openLogs(one, "produce", 1, cfg)
	if err != nil {
		return res, err
	}
	rings := buildRequests(1, requestBatches)
	r, err := appendWork(logs, rings, n, false)
	if err != nil {
		return res, fmt.Errorf("produce-shaped append: %w", err)
	}
	put("produce", r)

	// Fetch-shaped reads of that log, then raw sendfile of the same ranges.
	f, err := fetchShaped(logs[0], filepath.Join(dir, "raw-copy"), consumers, fetches)
	if err != nil {
		return res, fmt.Errorf("fetch-shaped reads: %w", err)
	}
	for k, v := range f {
		res.Values[k] = v
	}

	// The same partition, a Flush after every request.
	if r, err = appendWork(logs, rings, n/flushRequestShare, true); err != nil {
		return res, fmt.Errorf("produce-shaped append with a flush: %w", err)
	}
	put("produceFlush", r)

	// flush.messages=1: one 16 KiB batch per Append, each fsynced by the
	// log itself, as the "append" column's shape.
	fm, err := backend.ParseConfig(map[string]string{"flush.messages": "1"})
	if err != nil {
		return res, err
	}
	logs, err = openLogs(one, "flush-messages-1", 1, fm)
	if err != nil {
		return res, err
	}
	if r, err = appendWork(logs, buildRequests(1, 1), n/flushEveryShare, false); err != nil {
		return res, fmt.Errorf("flush.messages=1: %w", err)
	}
	put("flushMessages1", r)
	if err := one.Close(); err != nil {
		return res, err
	}
	os.RemoveAll(filepath.Join(dir, "one"))

	// 1,000 partitions of one Backend, 8 goroutines.
	many, err := local.OpenBackend(filepath.Join(dir, "many"), local.BackendOptions{})
	if err != nil {
		return res, err
	}
	defer many.Close()
	if logs, err = openLogs(many, "produce", manyPartitions, cfg); err != nil {
		return res, err
	}
	rings = buildRequests(appendGoroutines, requestBatches)
	if err := warm(logs, rings[0][0]); err != nil {
		return res, err
	}
	if r, err = appendWork(logs, rings, n, false); err != nil {
		return res, fmt.Errorf("%d partitions: %w", manyPartitions, err)
	}
	put("many", r)
	if r, err = appendWork(logs, rings, n/flushRequestShare, true); err != nil {
		return res, fmt.Errorf("%d partitions with a flush: %w", manyPartitions, err)
	}
	put("manyFlush", r)
	if err := many.Close(); err != nil {
		return res, err
	}
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// fetchRange is one fetch: the offset asked for, and where its bytes lie
// in the raw copy of the log (found before the clock starts; the length
// is what tierlog returned).
type fetchRange struct {
	offset, pos, size int64
}

// fetchShaped runs consumers goroutines, each doing fetches Reads of up
// to 1 MiB at uniformly random offsets of l, written to a loopback socket
// of its own (Records.WriteTo: sendfile); then, on a byte-for-byte copy
// of the log in a plain file, the same ranges by sendfile(2) from as many
// goroutines. Aggregate MB/s is of bytes sent.
func fetchShaped(l *local.Log, copyPath string, consumers, fetches int) (map[string]float64, error) {
	ctx := context.Background()
	// The raw copy: the log's batches in order, segment after segment, as
	// tierlog's own sequential read writes them into a file.
	cp, err := os.Create(copyPath)
	if err != nil {
		return nil, err
	}
	defer os.Remove(copyPath)
	defer cp.Close()
	end := l.Offsets().LogEnd
	for off := int64(0); off < end; {
		r, err := l.Read(ctx, off, backend.ReadOptions{MaxBytes: fetchMaxBytes, MinOneBatch: true})
		if err != nil {
			return nil, err
		}
		_, err = r.WriteTo(cp)
		r.Close()
		if err != nil {
			return nil, err
		}
		off = r.(backend.OffsetRange).NextOffset()
	}
	var segStart []int64
	var at int64
	for _, si := range l.SegmentInfos() {
		segStart = append(segStart, at)
		at += si.Size
	}
	ranges := make([][]fetchRange, consumers)
	rng := rand.New(rand.NewPCG(uint64(end), 64))
	for c := range ranges {
		for range fetches {
			off := rng.Int64N(end)
			lk, err := l.Lookup(off)
			if err != nil {
				return nil, err
			}
			ranges[c] = append(ranges[c], fetchRange{offset: off, pos: segStart[lk.SegmentIndex] + lk.BatchPosition})
		}
	}

	out := map[string]float64{}
	mbps, p50, p99, err := fetchRun(ranges, func(c, k int, conn *net.TCPConn) (int64, error) {
		r, err := l.Read(ctx, ranges[c][k].offset, backend.ReadOptions{MaxBytes: fetchMaxBytes, MinOneBatch: true})
		if err != nil {
			return 0, err
		}
		defer r.Close()
		n, err := r.WriteTo(conn)
		ranges[c][k].size = n
		return n, err
	})
	if err != nil {
		return nil, err
	}
	out["fetchMBps"], out["fetchP50us"], out["fetchP99us"] = mbps, p50, p99

	// The copy holds the same bytes at the positions found: check each
	// range's first batch's base offset before timing the raw sends.
	var hdr [8]byte
	for c := range ranges {
		for _, fr := range ranges[c] {
			if _, err := cp.ReadAt(hdr[:], fr.pos); err != nil {
				return nil, err
			}
			if base := int64(binary.BigEndian.Uint64(hdr[:])); base > fr.offset || fr.size <= 0 {
				return nil, fmt.Errorf("raw copy: the batch at %d has base offset %d, for offset %d (%d bytes fetched)", fr.pos, base, fr.offset, fr.size)
			}
		}
	}
	mbps, p50, p99, err = fetchRun(ranges, func(c, k int, conn *net.TCPConn) (int64, error) {
		return sendfileRange(conn, cp, ranges[c][k].pos, ranges[c][k].size)
	})
	if err != nil {
		return nil, err
	}
	out["rawSendfileMBps"], out["rawSendfileP50us"], out["rawSendfileP99us"] = mbps, p50, p99
	return out, nil
}

// sendfileRange sends size bytes of f from pos to conn with
// sendfile(2), 1 MiB a call, as sendfileMBps does.
func sendfileRange(conn *net.TCPConn, f *os.File, pos, size int64) (int64, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sent int64
	var serr error
	for sent < size && serr == nil {
		werr := raw.Write(func(fd uintptr) bool {
			o := pos + sent
			n, err := syscall.Sendfile(int(fd), int(f.Fd()), &o, int(min(1<<20, size-sent)))
			if err == syscall.EAGAIN {
				return false
			}
			if err != nil {
				serr = err
			}
			sent += int64(max(n, 0))
			return true
		})
		if werr != nil {
			return sent, werr
		}
	}
	return sent, serr
}

// fetchRun runs one goroutine per consumer, each with a loopback socket
// of its own, calling fetch for each of its ranges in order; it returns
// the aggregate MB/s of bytes sent (wall time from a common start to the
// last consumer's end) and the p50 and p99 of a fetch in µs.
func fetchRun(ranges [][]fetchRange, fetch func(c, k int, conn *net.TCPConn) (int64, error)) (mbps, p50, p99 float64, err error) {
	consumers := len(ranges)
	lats := make([][]time.Duration, consumers)
	sent := make([]int64, consumers)
	errs := make([]error, consumers)
	drained := make([]chan int64, consumers)
	conns := make([]*net.TCPConn, consumers)
	for c := range consumers {
		conn, got, err := loopback()
		if err != nil {
			return 0, 0, 0, err
		}
		conns[c], drained[c] = conn, got
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range consumers {
		wg.Go(func() {
			<-start
			for k := range ranges[c] {
				t := time.Now()
				n, err := fetch(c, k, conns[c])
				lats[c] = append(lats[c], time.Since(t))
				sent[c] += n
				if err != nil {
					errs[c] = err
					return
				}
			}
		})
	}
	t := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t)
	var total int64
	for c := range consumers {
		conns[c].Close()
		if n := <-drained[c]; n != sent[c] && errs[c] == nil {
			errs[c] = fmt.Errorf("consumer %d: socket drained %d of %d bytes", c, n, sent[c])
		}
		total += sent[c]
	}
	for _, err := range errs {
		if err != nil {
			return 0, 0, 0, err
		}
	}
	p50, p99 = percentiles(slices.Concat(lats...))
	return float64(total) / 1e6 / took.Seconds(), p50, p99, nil
}
