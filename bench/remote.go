package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/s3server"
	"github.com/tierlog/tierlog/tiered"
)

// Remote reads under load: fetchConsumers partitions of one tiered.Backend,
// each with one closed segment offloaded to the S3 server (versitygw) and
// deleted locally; fetchConsumers consumers, one a partition, read their
// partition's remote part from the start in fetches of up to 1 MiB, all at
// once, in a fresh process (cold: nothing cached in memory or on disk),
// through the Backend's defaults, as a broker runs it: 64 MiB of chunk
// cache and 64 MiB of index cache for all partitions, 1 MiB read-ahead,
// Kafka's remote reader pool (10 threads, 100 queued). The raw baseline:
// as many goroutines reading the same .log objects with ranged GETs of
// 1 MiB, through the same driver.

// envS3 carries the server and bucket from the parent to its children.
const envS3 = "TIERLOG_BENCH_S3"

// remoteBucket is the bucket the parent creates for the remote workloads.
const remoteBucket = "tierlog-bench"

// remoteTopic is the tiered topic's name; remotePrefix the Backend's
// bucket prefix.
const remoteTopic, remotePrefix = "remote", "bench"

// The caches a broker's tiered Backend has by default, which the remote
// read's memory is reported against (tiered.BackendOptions).
const (
	remoteChunkCache = 64 << 20
	remoteIndexCache = 64 << 20
)

// remoteSegmentBytes is each partition's offloaded segment: n records'
// values over 256 (4 MiB for the 1 GiB run; 256 MiB in the bucket in all),
// at least 64 KiB.
func remoteSegmentBytes(n int64) int64 { return max(n*100/256, 64<<10) }

// startS3 starts versitygw (from $TIERLOG_VERSITYGW or .cache/bin), makes
// the bench's bucket and sets envS3 for the children.
func startS3(ctx context.Context) (*s3server.Server, error) {
	srv, err := s3server.StartKind(ctx, s3server.VersityGW)
	if err != nil {
		return nil, err
	}
	c := s3.Config{Bucket: remoteBucket, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	if err := s3.CreateBucket(ctx, c); err != nil {
		srv.Close()
		return nil, err
	}
	b, _ := json.Marshal(c)
	os.Setenv(envS3, string(b))
	return srv, nil
}

// benchStore opens the bucket envS3 names.
func benchStore(ctx context.Context) (*objstore.Store, error) {
	var c s3.Config
	if err := json.Unmarshal([]byte(os.Getenv(envS3)), &c); err != nil || c.Endpoint == "" {
		return nil, fmt.Errorf("$%s: no S3 server (%v)", envS3, err)
	}
	d, err := s3.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	return objstore.New(d, "s3://"+c.Bucket, objstore.Options{}), nil
}

// remoteConfig is the tiered topic: segments of segBytes, every closed
// one uploaded and then deleted locally, nothing expired remotely.
func remoteConfig(segBytes int64) (backend.Config, error) {
	return backend.ParseConfig(map[string]string{"segment.bytes": strconv.FormatInt(segBytes, 10),
		"local.retention.ms": "0", "retention.ms": "-1", "file.delete.delay.ms": "0", "remote.storage.enable": "true"})
}

// remoteObject is one offloaded .log object.
type remoteObject struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// remoteSetup writes fetchConsumers partitions of one segment each into
// dir/logs, lets the Backend's service offload them and delete the local
// copies, and lists each partition's .log objects in dir/remote.json.
func remoteSetup(dir string, n int64) error {
	ctx := context.Background()
	store, err := benchStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	b, err := tiered.OpenBackend(filepath.Join(dir, "logs"), tiered.BackendOptions{Store: store, Prefix: remotePrefix})
	if err != nil {
		return err
	}
	defer b.Close()
	seg := remoteSegmentBytes(n)
	cfg, err := remoteConfig(seg)
	if err != nil {
		return err
	}
	ring := buildRequests(1, 1)[0]
	k := 0
	var parts []*tiered.Partition
	for i := range fetchConsumers {
		p, err := b.Open(ctx, remoteTopic, int32(i), cfg)
		if err != nil {
			return err
		}
		tp, ok := p.(*tiered.Partition)
		if !ok {
			return fmt.Errorf("a remote.storage.enable topic opened as %T", p)
		}
		for size := int64(0); size+int64(len(ring[k].batches)) <= seg; k = (k + 1) % len(ring) {
			info, err := tp.Append(ctx, ring[k].produced(), backend.AppendOptions{AssignOffsets: true})
			if err != nil {
				return err
			}
			if err := tp.SetHighWatermark(info.LastOffset + 1); err != nil {
				return err
			}
			size += int64(len(ring[k].batches))
		}
		if err := tp.Roll(); err != nil {
			return err
		}
		if err := tp.BecomeLeader(ctx, 1); err != nil {
			return err
		}
		parts = append(parts, tp)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for _, p := range parts {
		for {
			o := p.Offsets()
			if n, _ := p.CopyLag(); n == 0 && o.LocalLogStart == o.LogEnd {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("partition %s: not offloaded after 5 minutes: %+v", p.Prefix(), o)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	objects := make([][]remoteObject, len(parts))
	for i, p := range parts {
		m, err := p.Manifest(ctx)
		if err != nil {
			return err
		}
		for _, s := range m.Segments {
			objects[i] = append(objects[i], remoteObject{Key: p.Prefix() + "/" + s.Name(".log"), Size: s.Size})
		}
	}
	js, err := json.Marshal(objects)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "remote.json"), js, 0o644); err != nil {
		return err
	}
	return b.Close()
}

// currentRSSMB is the process's resident set now.
func currentRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseFloat(string(f[1]), 64)
	return pages * float64(os.Getpagesize()) / (1 << 20)
}

// runRemoteTiered opens the Backend remoteSetup left, cold (its on-disk
// index cache removed), and runs the consumers.
func runRemoteTiered(dir string) (result, error) {
	res := result{System: "tiered, remote reads under load", Values: map[string]float64{}}
	ctx := context.Background()
	logs := filepath.Join(dir, "logs")
	if err := os.RemoveAll(filepath.Join(logs, tiered.RemoteIndexCacheDir)); err != nil {
		return res, err
	}
	store, err := benchStore(ctx)
	if err != nil {
		return res, err
	}
	defer store.Close()
	b, err := tiered.OpenBackend(logs, tiered.BackendOptions{Store: store, Prefix: remotePrefix,
		ChunkCacheBytes: remoteChunkCache, IndexCacheBytes: remoteIndexCache})
	if err != nil {
		return res, err
	}
	defer b.Close()
	cfg, err := remoteConfig(1 << 30) // segment.bytes matters only to appends
	if err != nil {
		return res, err
	}
	var parts []backend.Partition
	for i := range fetchConsumers {
		p, err := b.Open(ctx, remoteTopic, int32(i), cfg)
		if err != nil {
			return res, err
		}
		if o := p.Offsets(); o.LocalLogStart <= o.LogStart {
			return res, fmt.Errorf("partition %d has nothing remote: %+v", i, o)
		}
		parts = append(parts, p)
	}
	res.Values["remoteOpenRSSMB"] = currentRSSMB()
	busy := make([]int, len(parts)) // fetches refused, by consumer
	mbps, p50, p99, err := parallelReads(len(parts), func(c int, fetch func(func() (int64, error)) error) error {
		p := parts[c]
		o := p.Offsets()
		for off := o.LogStart; off < o.LocalLogStart; {
			err := fetch(func() (int64, error) {
				r, err := p.Read(ctx, off, backend.ReadOptions{MaxBytes: fetchMaxBytes, MinOneBatch: true})
				if err != nil {
					return 0, err
				}
				defer r.Close()
				n, err := r.WriteTo(io.Discard)
				off = r.(backend.OffsetRange).NextOffset()
				return n, err
			})
			if errors.Is(err, tiered.ErrRemoteReadsBusy) {
				// A broker answers the fetch with an error and the consumer
				// comes back: so does this one, a moment later.
				busy[c]++
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				return fmt.Errorf("partition %d offset %d: %w", c, off, err)
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	refused := 0
	for _, n := range busy {
		refused += n
	}
	res.Values["remoteMBps"], res.Values["remoteP50us"], res.Values["remoteP99us"] = mbps, p50, p99
	res.Values["remoteBusy"] = float64(refused)
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// runRemoteRaw reads the objects remoteSetup listed with ranged GETs of
// up to 1 MiB, one goroutine a partition.
func runRemoteRaw(dir string) (result, error) {
	res := result{System: "raw ranged GETs", Values: map[string]float64{}}
	ctx := context.Background()
	js, err := os.ReadFile(filepath.Join(dir, "remote.json"))
	if err != nil {
		return res, err
	}
	var objects [][]remoteObject
	if err := json.Unmarshal(js, &objects); err != nil {
		return res, err
	}
	store, err := benchStore(ctx)
	if err != nil {
		return res, err
	}
	defer store.Close()
	mbps, p50, p99, err := parallelReads(len(objects), func(c int, fetch func(func() (int64, error)) error) error {
		for _, o := range objects[c] {
			for at := int64(0); at < o.Size; at += fetchMaxBytes {
				err := fetch(func() (int64, error) {
					b, err := store.ReadAll(ctx, o.Key, at, min(fetchMaxBytes, o.Size-at))
					return int64(len(b)), err
				})
				if err != nil {
					return fmt.Errorf("%s at %d: %w", o.Key, at, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.Values["rawGetMBps"], res.Values["rawGetP50us"], res.Values["rawGetP99us"] = mbps, p50, p99
	res.PeakRSSMB = peakRSSMB()
	return res, nil
}

// parallelReads runs readers goroutines from a common start; each calls
// fetch around every read it makes, which times the read and counts its
// bytes. It returns the aggregate MB/s over the wall time and the p50 and
// p99 of a read in µs.
func parallelReads(readers int, read func(c int, fetch func(func() (int64, error)) error) error) (mbps, p50, p99 float64, err error) {
	lats := make([][]time.Duration, readers)
	got := make([]int64, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range readers {
		wg.Go(func() {
			<-start
			errs[c] = read(c, func(f func() (int64, error)) error {
				t := time.Now()
				n, err := f()
				if err == nil {
					lats[c] = append(lats[c], time.Since(t))
					got[c] += n
				}
				return err
			})
		})
	}
	t := time.Now()
	close(start)
	wg.Wait()
	took := time.Since(t)
	if err := errors.Join(errs...); err != nil {
		return 0, 0, 0, err
	}
	var total int64
	for _, n := range got {
		total += n
	}
	p50, p99 = percentiles(slices.Concat(lats...))
	return float64(total) / 1e6 / took.Seconds(), p50, p99, nil
}

// runRemote starts the S3 server, writes the remote workload's partitions
// once (remote-setup), then runs the tiered consumers and the raw ranged
// GETs in turn, runs times each, into byKind["remote-tiered"] and
// byKind["remote-raw"].
func runRemote(byKind map[string][]result, dir string, n int64, runs int, reads int64) error {
	defer os.RemoveAll(dir)
	srv, err := startS3(context.Background())
	if err != nil {
		return fmt.Errorf("remote reads: the S3 server: %w", err)
	}
	defer srv.Close()
	fmt.Fprintln(os.Stderr, "remote-setup")
	if _, err := runChild("remote-setup", dir, n, reads); err != nil {
		return err
	}
	for r := range runs {
		for _, kind := range []string{"remote-tiered", "remote-raw"} {
			fmt.Fprintf(os.Stderr, "run %d/%d: %s\n", r+1, runs, kind)
			res, err := runChild(kind, dir, n, reads)
			if err != nil {
				return err
			}
			byKind[kind] = append(byKind[kind], res)
		}
	}
	return nil
}
