package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
)

// Step 10 of the demo: the reference broker as its own process, and a
// Kafka client through it.

// demoBrokerPrefix is where, in the demo's bucket, the broker keeps its
// tiered partitions (each under demoBrokerPrefix/<topic>-<partition>/).
const demoBrokerPrefix = "demo/broker"

// demoBrokerConfig is the default topic config the demo's broker gets: a
// tiered topic with small segments, deleted locally once uploaded.
var demoBrokerConfig = map[string]string{"remote.storage.enable": "true", "segment.bytes": "65536",
	"local.retention.ms": "0", "file.delete.delay.ms": "0"}

// demoBroker runs the reference broker at brokerPath as its own process on
// a loopback port, with dir as its data directory and the demo's bucket
// (under demoBrokerPrefix) for its tiered topics, and produces and
// consumes n records through it with kgo, the Kafka client, in this
// process: to a tiered topic whose closed segments leave the disk once
// uploaded, so the consumer reads them back from the bucket. Without a
// broker, or with a mem:// bucket, it says that it skipped the step.
func demoBroker(ctx context.Context, w io.Writer, brokerPath, dir, storeURL string, store *objstore.Store, n int, sum *demoSummary) (err error) {
	fmt.Fprintf(w, "10. A Kafka client through the reference broker (examples/broker) on loopback\n")
	if brokerPath == "" {
		sum.BrokerSkipped = "no --broker"
		fmt.Fprintf(w, "   skipped: no --broker. tierctl does not link the broker; it runs as its own process:\n")
		fmt.Fprintf(w, "   make demo builds it and passes --broker, or: go build -o /tmp/broker ./examples/broker && tierctl demo --broker /tmp/broker\n\n")
		return nil
	}
	if u, perr := url.Parse(storeURL); perr == nil && strings.EqualFold(u.Scheme, "mem") {
		sum.BrokerSkipped = "mem:// bucket"
		fmt.Fprintf(w, "   skipped: the broker runs as its own process, which cannot see this process's mem:// bucket;\n")
		fmt.Fprintf(w, "   run it with a file://, s3:// or minio:// --store (the default is a file:// bucket in the demo directory)\n\n")
		return nil
	}
	brokerURL, err := brokerStoreURL(storeURL)
	if err != nil {
		return err
	}
	args := []string{"--listen", "127.0.0.1:0", "--dir", dir, "--store", brokerURL}
	for _, k := range slices.Sorted(maps.Keys(demoBrokerConfig)) {
		args = append(args, "--config", k+"="+demoBrokerConfig[k])
	}
	b, err := startBroker(ctx, brokerPath, args...)
	if err != nil {
		return err
	}
	defer b.stopInto(&err)
	// Every wait below ends when the broker exits.
	ctx = b.Context()
	fmt.Fprintf(w, "   started %s (pid %d): listening on %s, its tiered topics in %s\n", brokerPath, b.cmd.Process.Pid, b.Addr, storeurl.Redact(brokerURL))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("clicks"),
		kgo.ProducerBatchCompression(kgo.Lz4Compression()), kgo.ProducerBatchMaxBytes(32<<10))
	if err != nil {
		return err
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	size := 0
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "user-%d", i%500), Value: fmt.Appendf(nil, "click %08d on /products/%d", i, i%977)}
		size += len(recs[i].Key) + len(recs[i].Value)
	}
	t0 := time.Now()
	produceCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := cl.ProduceSync(produceCtx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("demo: produce through the broker: %w", err)
	}
	produced := time.Since(t0)
	// The broker's tiering service uploads each closed segment and
	// deletes its local copy (local.retention.ms=0): wait for it.
	partDir := filepath.Join(dir, "logs", "clicks-0")
	remoteSegs, localStart, err := waitBrokerOffloaded(ctx, store, manifest.PartitionLayout(demoBrokerPrefix, "clicks", 0).Prefix(), partDir)
	if err != nil {
		return err
	}
	t0 = time.Now()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics("clicks"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cons.Close()
	got := 0
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for got < n {
		fetches := cons.PollFetches(pollCtx)
		if err := fetches.Err0(); err != nil {
			return fmt.Errorf("demo: consume through the broker: %w", err)
		}
		for _, r := range fetches.Records() {
			if r.Offset != int64(got) || string(r.Value) != string(recs[got].Value) {
				return fmt.Errorf("demo: the broker returned offset %d %q, want offset %d %q", r.Offset, r.Value, got, recs[got].Value)
			}
			got++
		}
	}
	consumed := time.Since(t0)
	cons.Close()
	cl.Close()
	sum.BrokerRecords = got
	sum.BrokerProduceMBps = float64(size) / 1e6 / produced.Seconds()
	sum.BrokerConsumeMBps = float64(size) / 1e6 / consumed.Seconds()
	fmt.Fprintf(w, "   kgo (idempotent, lz4) produced %d records in %v (%.0f MB/s) and consumed them back in order in %v (%.0f MB/s)\n",
		n, produced.Round(time.Millisecond), sum.BrokerProduceMBps, consumed.Round(time.Millisecond), sum.BrokerConsumeMBps)
	if remoteSegs > 0 {
		fmt.Fprintf(w, "   clicks is tiered (remote.storage.enable=true, local.retention.ms=0): offsets 0..%d came from %d segment(s) in the bucket, the rest from the active segment\n",
			localStart-1, remoteSegs)
	} else {
		fmt.Fprintf(w, "   clicks is tiered (remote.storage.enable=true, local.retention.ms=0), but no segment of it closed yet: all came from the active segment\n")
	}
	fmt.Fprintf(w, "   through Kafka's wire protocol: Produce appends to a tierlog partition; Fetch sends local segments with sendfile, bucket ranges from ranged GETs\n")
	if localStart > 0 {
		if err := demoReplica(ctx, w, brokerPath, dir+"-replica", brokerURL, recs[:localStart], sum); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	return nil
}

// demoReplica starts a second broker as a read replica of the first's
// bucket (--read-replica-of) and consumes from it what the bucket holds
// of clicks-0, checking it record by record against recs.
func demoReplica(ctx context.Context, w io.Writer, brokerPath, dir, brokerURL string, recs []*kgo.Record, sum *demoSummary) (err error) {
	b, err := startBroker(ctx, brokerPath, "--listen", "127.0.0.1:0", "--dir", dir, "--read-replica-of", brokerURL)
	if err != nil {
		return err
	}
	defer b.stopInto(&err)
	ctx = b.Context()
	t0 := time.Now()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"clicks": {0: kgo.NewOffset().At(0)}}))
	if err != nil {
		return err
	}
	defer cons.Close()
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := 0
	for got < len(recs) {
		fetches := cons.PollFetches(pollCtx)
		if err := fetches.Err0(); err != nil {
			return fmt.Errorf("demo: consume from the read replica: %w", err)
		}
		for _, r := range fetches.Records() {
			if got >= len(recs) {
				break
			}
			if r.Offset != int64(got) || string(r.Value) != string(recs[got].Value) {
				return fmt.Errorf("demo: the read replica returned offset %d %q, want offset %d %q", r.Offset, r.Value, got, recs[got].Value)
			}
			got++
		}
	}
	sum.ReplicaRecords = got
	fmt.Fprintf(w, "   a second broker, a read replica of that bucket (--read-replica-of, pid %d), served kgo offsets 0..%d from the bucket alone in %v: it found clicks by listing the bucket, follows each commit, and writes nothing there\n",
		b.cmd.Process.Pid, got-1, time.Since(t0).Round(time.Millisecond))
	return nil
}

// stopInto stops the broker and folds the outcome into *err (a deferred
// call's named result): Stop's error carries the broker's output; else an
// error the run had gets it.
func (p *brokerProcess) stopInto(err *error) {
	switch stopErr := p.Stop(); {
	case *err == nil:
		*err = stopErr
	case stopErr != nil:
		*err = fmt.Errorf("%w\n%w", *err, stopErr)
	default:
		*err = p.withOutput(*err)
	}
}

// brokerStoreURL is the URL of the demo's bucket under demoBrokerPrefix,
// for the broker's --store: the prefix appended to the URL's path (a
// file:// directory, or an s3:// or minio:// key prefix), and for file://
// create=true, since the prefix's directory does not exist yet. The demo
// has opened storeURL, so it parses and holds no credentials.
func brokerStoreURL(storeURL string) (string, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", fmt.Errorf("demo: %s: %w", storeurl.Redact(storeURL), err)
	}
	u.Path, u.RawPath = path.Join(u.Path, demoBrokerPrefix), ""
	if strings.EqualFold(u.Scheme, "file") {
		q := u.Query()
		q.Set("create", "true")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// waitBrokerOffloaded waits, at most a minute, until the broker's
// partition directory dir holds one segment (the active one) and the
// manifest under prefix in store covers every offset below it: every
// closed segment uploaded and its local copy deleted. It only reads: the
// segment file names in dir and the committed manifest. It returns the
// manifest's segments and the local log start (the active segment's base).
func waitBrokerOffloaded(ctx context.Context, store *objstore.Store, prefix, dir string) (remoteSegs int, localStart int64, err error) {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var bases []int64
	var remoteEnd int64
	for {
		bases, err = brokerDirSegments(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, 0, fmt.Errorf("demo: the broker's partition directory: %w", err)
		}
		if len(bases) == 1 {
			m, err := tiered.ReadManifest(wait, store, prefix)
			if err != nil && wait.Err() == nil {
				return 0, 0, fmt.Errorf("demo: the broker's manifest under %s: %w", prefix, err)
			}
			if err == nil {
				remoteEnd = 0
				if len(m.Segments) > 0 {
					remoteEnd = m.Segments[len(m.Segments)-1].LastOffset + 1
				}
				if remoteEnd >= bases[0] {
					return len(m.Segments), bases[0], nil
				}
			}
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return 0, 0, fmt.Errorf("demo: waiting for the broker's uploads: %w", ctx.Err())
			}
			return 0, 0, fmt.Errorf("demo: the broker did not upload clicks-0's segments within a minute: %s holds %d segment(s), the bucket's manifest under %s ends at offset %d",
				dir, len(bases), prefix, remoteEnd)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
