package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/record"
)

// runBaselines measures the machine on the same number of bytes the
// systems store (n 100-byte values): sequential os.File.Write in 16 KiB
// writes (page cache; with a final fsync; with an fsync, or an fdatasync,
// every 100,000 bytes, the values of 1,000 records), in 64 KiB writes (a
// produce request's four batches), on n/16 records' bytes with an fsync
// after every 16 KiB write (flush.messages=1's cadence), and on n/8
// records' bytes in 64 KiB writes each fsynced (a Flush per produce
// request); sendfile of the file to a loopback socket, CRC-32C over the
// bytes, and copy (memory bandwidth).
func runBaselines(dir string, n int64) (result, error) {
	res := result{System: "machine", Values: map[string]float64{}}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	total := n * 100
	mb := float64(total) / 1e6
	// The bytes come from a 64 MiB buffer, walked 16 KiB at a time, as the
	// systems' appends come from chunks prepared in memory: rewriting one
	// cache-hot 16 KiB buffer would flatter the baseline.
	src := make([]byte, 64<<20)
	for i := range src {
		src[i] = byte(i)
	}
	fsync := func(f *os.File) error { return f.Sync() }
	fdatasync := func(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
	// write writes size bytes into a new file, chunk bytes a call; with
	// sync, it syncs after the write that crosses each syncEvery bytes
	// (every write when syncEvery is 0) and at the end, as the systems'
	// durable appends do. It returns MB/s.
	write := func(path string, size, chunk, syncEvery int64, sync func(*os.File) error) (float64, error) {
		f, err := os.Create(path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if sync != nil {
			syscall.Sync() // no writeback of the writes before this one pending (untimed)
		}
		start := time.Now()
		var unsynced int64
		for done := int64(0); done < size; done += chunk {
			at := done % int64(len(src))
			m := min(chunk, size-done)
			if _, err := f.Write(src[at : at+m]); err != nil {
				return 0, err
			}
			if unsynced += m; sync != nil && (unsynced >= syncEvery || done+m >= size) {
				if err := sync(f); err != nil {
					return 0, err
				}
				unsynced = 0
			}
		}
		return float64(size) / 1e6 / time.Since(start).Seconds(), nil
	}
	for _, w := range []struct {
		key               string
		size, chunk, sync int64
		syncf             func(*os.File) error
	}{
		{"write", total, 16 << 10, 0, nil},
		{"writeFsync", total, 16 << 10, total, fsync},
		{"writeFsync1000", total, 16 << 10, 1000 * 100, fsync},
		{"writeFdatasync1000", total, 16 << 10, 1000 * 100, fdatasync},
		{"write64k", total, requestBatches * 16 << 10, 0, nil},
		{"writeFsyncEach", total / flushEveryShare, 16 << 10, 0, fsync},
		{"write64kFsyncEach", total / flushRequestShare, requestBatches * 16 << 10, 0, fsync},
	} {
		var err error
		if res.Values[w.key], err = write(filepath.Join(dir, w.key), w.size, w.chunk, w.sync, w.syncf); err != nil {
			return res, err
		}
		if w.key != "write" { // kept for sendfile
			os.Remove(filepath.Join(dir, w.key))
		}
	}
	// The same writes of real batches, each first validated as a leader
	// validates a client's (the log's own checks): the limit a log that
	// checks what it writes can reach, of which the log's append is the
	// rest.
	for _, w := range []struct {
		key     string
		batches int
	}{{"writeValidated", 1}, {"write64kValidated", requestBatches}} {
		var err error
		if res.Values[w.key], err = validatedWrite(filepath.Join(dir, w.key), n, w.batches); err != nil {
			return res, fmt.Errorf("%s: %w", w.key, err)
		}
		os.Remove(filepath.Join(dir, w.key))
	}
	var err error
	if res.Values["sendfile"], err = sendfileMBps(filepath.Join(dir, "write"), total); err != nil {
		return res, err
	}
	os.Remove(filepath.Join(dir, "write"))

	buf := make([]byte, 16<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	tab := crc32.MakeTable(crc32.Castagnoli)
	start := time.Now()
	var crc uint32
	for done := int64(0); done < total; done += int64(len(buf)) {
		crc = crc32.Update(crc, tab, buf[:min(int64(len(buf)), total-done)])
	}
	res.Values["crc32c"] = mb / time.Since(start).Seconds()
	dst := make([]byte, len(buf))
	start = time.Now()
	for done := int64(0); done < total; done += int64(len(buf)) {
		copy(dst, buf[:min(int64(len(buf)), total-done)])
	}
	res.Values["copy"] = mb / time.Since(start).Seconds()
	runtime.KeepAlive(crc)
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// loopback returns a connected TCP pair's sending end, and a channel that
// yields the bytes the receiving end drained once the sender closes. It
// returns once the listener has accepted: closing a listener resets the
// connections it has not accepted yet.
func loopback() (*net.TCPConn, chan int64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		accepted <- err
		if err != nil {
			got <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close() // ends the Accept
		<-accepted
		return nil, nil, err
	}
	if err := <-accepted; err != nil {
		c.Close()
		return nil, nil, err
	}
	return c.(*net.TCPConn), got, nil
}

// sendfileMBps sends path to a loopback socket with sendfile(2), 1 MiB a
// call.
func sendfileMBps(path string, total int64) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	conn, got, err := loopback()
	if err != nil {
		return 0, err
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var off int64
	var serr error
	for off < total && serr == nil {
		raw.Write(func(fd uintptr) bool {
			o := off
			n, err := syscall.Sendfile(int(fd), int(f.Fd()), &o, int(min(1<<20, total-off)))
			if err == syscall.EAGAIN {
				return false
			}
			if err != nil {
				serr = err
			}
			off += int64(max(n, 0))
			return true
		})
	}
	conn.Close()
	if n := <-got; n != total || serr != nil {
		return 0, fmt.Errorf("sendfile: %d of %d bytes: %v", n, total, serr)
	}
	return float64(total) / 1e6 / time.Since(start).Seconds(), nil
}

// scanToSocket is tierlog's sequential read as a broker serves a fetch:
// Read then Records.WriteTo a socket (sendfile from the page cache).
func (s *tierlogSys) scanToSocket() (int64, error) {
	conn, got, err := loopback()
	if err != nil {
		return 0, err
	}
	end := s.l.Offsets().LogEnd
	var sent int64
	for off := int64(0); off < end; {
		r, err := s.l.Read(context.Background(), off, backend.ReadOptions{MaxBytes: 1 << 20, MinOneBatch: true})
		if err != nil {
			return 0, err
		}
		n, err := r.WriteTo(conn)
		r.Close()
		if err != nil {
			return 0, err
		}
		sent += n
		off = r.(backend.OffsetRange).NextOffset()
	}
	conn.Close()
	if n := <-got; n != sent {
		return 0, fmt.Errorf("socket drained %d of %d bytes", n, sent)
	}
	return sent, nil
}

// partitionsSetup writes 10,000 one-batch partitions into dir and closes
// them cleanly, each as soon as it is written: 10,000 open active segments
// (a descriptor and two index files each) would pass a 20,000-descriptor
// limit.
func partitionsSetup(dir string) error {
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		return err
	}
	var bl record.Builder
	for p := range int32(10_000) {
		l, err := b.OpenLog(context.Background(), "t", p, backend.DefaultConfig())
		if err != nil {
			return err
		}
		bl.Reset(record.NewBatchHeader())
		bl.Append(1_700_000_000_000, nil, make([]byte, 100), nil)
		batch, _ := bl.Build()
		if _, err := l.Append(context.Background(), batch, backend.AppendOptions{AssignOffsets: true}); err != nil {
			return err
		}
		l.SetHighWatermark(1)
		if err := l.Close(); err != nil {
			return err
		}
	}
	return b.Close()
}

// runPartitions opens the 10,000 partitions partitionsSetup wrote and
// reads one record from each.
func runPartitions(dir string) (result, error) {
	res := result{System: "tierlog 10,000 partitions", Values: map[string]float64{}}
	start := time.Now()
	b, err := local.OpenBackend(dir, local.BackendOptions{})
	if err != nil {
		return res, err
	}
	defer b.Close()
	for p := range int32(10_000) {
		l, err := b.OpenLog(context.Background(), "t", p, backend.DefaultConfig())
		if err != nil {
			return res, err
		}
		if l.Offsets().LogEnd != 1 {
			return res, fmt.Errorf("partition %d: log end %d", p, l.Offsets().LogEnd)
		}
	}
	res.Values["openMs"] = float64(time.Since(start).Microseconds()) / 1000
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// validatedWrite writes n records' batches (16 KiB of 100-byte values
// each, built as the broker shapes' are, untimed) into a new file, perWrite
// batches a write, each batch validated first as the log validates a
// client's (record.Validator.ValidateForLeader: the CRC, every record
// decoded, with the options of a default topic). It returns MB/s of values,
// the unit of the systems' append.
func validatedWrite(path string, n int64, perWrite int) (float64, error) {
	cfg := backend.DefaultConfig()
	tc, err := record.ParseTopicCompression(cfg.CompressionType)
	if err != nil {
		return 0, err
	}
	opts := record.LeaderOptions{TimestampType: record.CreateTime, TimestampBeforeMaxMs: cfg.MessageTimestampBeforeMaxMs,
		TimestampAfterMaxMs: cfg.MessageTimestampAfterMaxMs, Compression: tc, MaxMessageBytes: cfg.MaxMessageBytes}
	ring := buildRequests(1, perWrite)[0]
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var v record.Validator
	start := time.Now()
	for done, k := int64(0), 0; done < n; k++ {
		req := ring[k%len(ring)]
		now := time.Now().UnixMilli()
		for i, at := range req.starts {
			end := len(req.batches)
			if i+1 < len(req.starts) {
				end = req.starts[i+1]
			}
			if _, err := v.ValidateForLeader(record.Batch(req.batches[at:end]), now, opts); err != nil {
				return 0, err
			}
		}
		if _, err := f.Write(req.batches); err != nil {
			return 0, err
		}
		done += int64(req.records)
	}
	return payloadMB(n) / time.Since(start).Seconds(), nil
}
