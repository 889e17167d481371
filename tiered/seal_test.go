package tiered_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/testing/storagetest"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// keyLines holds each KEK id's key file line, so rings made by id share
// the key.
var keyLines = map[string]string{}

// keyRing is a key file ring of ids, the last one active.
func keyRing(t testing.TB, ids ...string) *seal.KeyFile {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		if keyLines[id] == "" {
			line, err := seal.NewKey(id)
			if err != nil {
				t.Fatal(err)
			}
			keyLines[id] = line
		}
		b.WriteString(keyLines[id] + "\n")
	}
	b.WriteString("active " + ids[len(ids)-1] + "\n")
	kf, err := seal.ParseKeyFile("test", strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return kf
}

// sealedStore is a store sealing into inner under ring, in chunks of 4
// KiB so that reads cross chunks.
func sealedStore(t testing.TB, inner objstore.Driver, ring seal.KeyRing) *objstore.Store {
	t.Helper()
	d, err := seal.New(inner, ring, seal.Options{ChunkSize: seal.MinChunkSize})
	if err != nil {
		t.Fatal(err)
	}
	return objstore.New(d, "sealed", objstore.Options{})
}

// TestConformanceSealed runs the storage battery over a sealed bucket:
// every read of an offloaded offset, cold and cached, through chunks.
func TestConformanceSealed(t *testing.T) {
	var stores []*objstore.Store
	metrics := new(tiered.Metrics)
	all := storagetest.Run(t, func(t *testing.T) storagetest.Harness {
		s := sealedStore(t, mem.New(), keyRing(t, "k1"))
		stores = append(stores, s)
		return &tieredHarness{dir: filepath.Join(t.TempDir(), "t-0"), store: s, metrics: metrics}
	})
	var gets int64
	for _, s := range stores {
		gets += s.Stats().Requests[objstore.OpGet]
	}
	if reads := metrics.RemoteReads.Load(); all && (reads < 500 || gets < 30) {
		t.Fatalf("only %d reads from the bucket (%d GETs): the battery barely read from it", reads, gets)
	}
}

// ordersCfg is the classic tiered topic of fillBucket.
var ordersCfg = []string{"remote.storage.enable", "true", "segment.bytes", "16384", "local.retention.ms", "0", "file.delete.delay.ms", "0", "retention.ms", "-1"}

// secretValue is the value the bucket must not show.
var secretValue = []byte("tierlog-secret-value-0123456789-")

// fillBucket writes every kind of object tierlog puts in a bucket into
// store: a classic tiered topic's segments with aborted transactions
// (.log, .index, .timeindex, .txnindex, .snapshot, the epochs), its
// manifest and backups and parts, a diskless topic's WAL objects. It
// returns the classic topic's batches by last offset and the Backend's
// directory (closed).
func fillBucket(t *testing.T, store *objstore.Store) (map[int64][]byte, string) {
	t.Helper()
	dir := t.TempDir()
	b := openDisklessBackend(t, filepath.Join(dir, "broker"), store)
	defer b.Close()
	bp, err := b.Open(ctx, "classic", 0, cfg(t, ordersCfg...))
	if err != nil {
		t.Fatal(err)
	}
	p := bp.(*tiered.Partition)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pr := &txnProducer{id: 7, txn: true}
	var rb record.Builder
	for i := range 40 {
		h := record.NewBatchHeader()
		h.ProducerID, h.ProducerEpoch, h.BaseSequence, h.Transactional = pr.id, pr.epoch, pr.seq, true
		rb.Reset(h)
		for range 20 {
			rb.Append(time.Now().UnixMilli(), []byte("k"), bytes.Repeat(secretValue, 4), nil)
		}
		batch, err := rb.Build()
		if err != nil {
			t.Fatal(err)
		}
		pr.seq += 20
		mustAppendAsLeader(t, p, batch, false)
		mustAppendAsLeader(t, p, pr.marker(i%3 != 0), true)
	}
	if err := p.BecomeLeader(ctx, 2); err != nil { // a second epoch
		t.Fatal(err)
	}
	produceValue(t, p, 100, "s")
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
	want := batchesFrom(t, p, 0)

	d := openDiskless(t, b, 1)
	for range 5 {
		if _, err := appendOne(t, d, 10, "w"); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}

	// Parts and backups: 17 commits of 16 segments each.
	l, err := local.Open(filepath.Join(dir, "parts-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := tiered.Open(ctx, l, tiered.Options{Store: store, Prefix: "tl/parts-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	for i := range 17 {
		if err := tiered.CommitSegments(ctx, parts, synthSegments(int64(i)*1600, 16, time.Now().UnixMilli())); err != nil {
			t.Fatal(err)
		}
	}
	return want, filepath.Join(dir, "broker")
}

// kindOf names a bucket object's kind, for the test's tally.
func kindOf(key string) string {
	switch {
	case strings.Contains(key, seal.KeyDir):
		return "bucket key"
	case strings.Contains(key, "/"+wal.Dir+"/"):
		return "wal"
	}
	k, err := manifest.ParseKey(key)
	if err != nil {
		return "other: " + key
	}
	return k.Kind.String()
}

// TestSealedBucketHoldsNoPlaintext: after a broker's worth of writes to a
// sealed bucket, every object but the bucket keys is sealed, no object
// holds a record value, and a new Backend with the key ring reads it all
// back; without the key it fails naming the key. The same writes to a
// bucket that is not sealed show the value (the scan can see it).
func TestSealedBucketHoldsNoPlaintext(t *testing.T) {
	scan := func(inner *mem.Driver) (kinds map[string]int, plain, unsealed []string) {
		raw := objstore.New(inner, "raw", objstore.Options{})
		kinds = map[string]int{}
		if err := raw.List(ctx, "", func(o objstore.ObjectInfo) bool {
			kinds[kindOf(o.Key)]++
			data, err := raw.ReadAll(ctx, o.Key, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, secretValue[:16]) {
				plain = append(plain, o.Key)
			}
			if !strings.Contains(o.Key, seal.KeyDir) && !bytes.HasPrefix(data, []byte("\xffTLSEAL")) {
				unsealed = append(unsealed, o.Key)
			}
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return kinds, plain, unsealed
	}

	control := mem.New()
	_, _ = fillBucket(t, objstore.New(control, "plain", objstore.Options{}))
	if _, plain, _ := scan(control); len(plain) == 0 {
		t.Fatal("the scan finds no value in a bucket that is not sealed")
	}

	inner := mem.New()
	want, dir := fillBucket(t, sealedStore(t, inner, keyRing(t, "k1")))
	kinds, plain, unsealed := scan(inner)
	t.Logf("objects by kind: %v", kinds)
	for _, k := range []string{"manifest", "log", "index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint", "backup", "part", "wal", "bucket key"} {
		if kinds[k] == 0 {
			t.Errorf("no %s object in the bucket (kinds: %v)", k, kinds)
		}
	}
	for k := range kinds {
		if strings.HasPrefix(k, "other") {
			t.Errorf("an object of no known kind: %s", k)
		}
	}
	if len(plain) > 0 || len(unsealed) > 0 {
		t.Fatalf("plaintext values in %v; not sealed: %v", plain, unsealed)
	}

	// A restore through a new Driver (no header or key kept) brings the
	// topic back from the bucket, every batch as it was; so does the
	// broker restarted, reading them from the bucket.
	checkRestore(t, sealedStore(t, inner, keyRing(t, "k1")), want)
	restart := func(ring seal.KeyRing) (*tiered.Partition, func(), error) {
		b := openTieredBackend(t, dir, sealedStore(t, inner, ring), tiered.BackendOptions{})
		bp, err := b.Open(ctx, "classic", 0, cfg(t, ordersCfg...))
		if err == nil {
			err = bp.(*tiered.Partition).BecomeLeader(ctx, 3)
		}
		if err != nil {
			b.Close()
			return nil, nil, err
		}
		return bp.(*tiered.Partition), func() { b.Close() }, nil
	}
	p, done, err := restart(keyRing(t, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	got := batchesFrom(t, p, 0)
	done()
	checkBatches(t, "the restarted broker", got, want)
	// Without k1: a restore and a leader's open name it.
	wrong := sealedStore(t, inner, keyRing(t, "other"))
	_, err = tiered.Restore(ctx, wrong, "tl/classic-0", filepath.Join(t.TempDir(), "classic-0"), tiered.RestoreOptions{})
	wantKeyError(t, "restore", err, "k1")
	p, done, err = restart(keyRing(t, "other"))
	if err == nil {
		_, err = p.Read(ctx, 0, backend.ReadOptions{MaxBytes: 1, MinOneBatch: true})
		done()
	}
	wantKeyError(t, "a leader's open", err, "k1")
}

func wantKeyError(t *testing.T, what string, err error, id string) {
	t.Helper()
	var ke *seal.KeyError
	if !errors.As(err, &ke) || ke.ID != id || !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), `"`+id+`"`) {
		t.Fatalf("%s without the key: %v, want the missing key %s named", what, err, id)
	}
}

// TestSealedReadsAfterRekey: a bucket written under k1, re-keyed to k2,
// is read whole by a ring that holds only k2.
func TestSealedReadsAfterRekey(t *testing.T) {
	inner := mem.New()
	want, _ := fillBucket(t, sealedStore(t, inner, keyRing(t, "k1")))
	steps, err := seal.Rekey(ctx, sealedStore(t, inner, keyRing(t, "k1", "k2")), seal.RekeyOptions{})
	if err != nil || len(steps) == 0 || !slices.ContainsFunc(steps, func(s seal.RekeyStep) bool { return s.Done }) {
		t.Fatalf("rekey: %+v %v", steps, err)
	}
	checkRestore(t, sealedStore(t, inner, keyRing(t, "k2")), want)
}

// checkRestore restores the classic topic from store (under prefix, by
// default tl/classic-0) and checks its batches are want.
func checkRestore(t *testing.T, store *objstore.Store, want map[int64][]byte, prefix ...string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "classic-0")
	p := "tl/classic-0"
	if len(prefix) > 0 {
		p = prefix[0]
	}
	rm, err := tiered.Restore(ctx, store, p, dir, tiered.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.Open(dir, local.Options{Config: cfg(t), LogStartOffset: rm.LogStartOffset, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.SetHighWatermark(l.Offsets().LogEnd)
	checkBatches(t, "restored", batchesFrom(t, l, rm.LogStartOffset), want)
}

// TestSealedWALFootersAtAnotherChunkSize: WAL objects sealed with 4 KiB
// chunks, listed through a store sealing with 64 KiB ones (whose List
// sizes are then a few bytes off), still have their footers read.
func TestSealedWALFootersAtAnotherChunkSize(t *testing.T) {
	inner := mem.New()
	fillBucket(t, sealedStore(t, inner, keyRing(t, "k1")))
	d, err := seal.New(inner, keyRing(t, "k1"), seal.Options{ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	other := objstore.New(d, "sealed-64k", objstore.Options{})
	objs, err := tiered.ListWAL(ctx, other, "tl")
	if err != nil || len(objs) == 0 {
		t.Fatalf("%d WAL objects: %v", len(objs), err)
	}
	off := 0
	for _, o := range objs {
		info, err := other.Head(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size != o.Size {
			off++ // more than a chunk: listed a few bytes off
		}
		if _, err := wal.ReadFooter(ctx, other, o.Key, o.Size); err != nil {
			t.Fatalf("%s: %v", o.Key, err)
		}
	}
	if off == 0 {
		t.Fatal("every WAL object lists its exact size: the test tests nothing")
	}
}

// TestSealedBucketThroughAnotherRoot: a Backend with prefix "tl" sealing
// into a store at the bucket's root is read through a store rooted at
// tl/ (tierctl's way to reach a Backend's partitions: the prefix in the
// URL), and its keys are re-wrapped through either.
func TestSealedBucketThroughAnotherRoot(t *testing.T) {
	root := t.TempDir()
	open := func(dir string, ring seal.KeyRing) *objstore.Store {
		d, err := fs.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return sealedStore(t, d, ring)
	}
	want, _ := fillBucket(t, open(root, keyRing(t, "k1")))
	checkRestore(t, open(filepath.Join(root, "tl"), keyRing(t, "k1")), want, "classic-0")

	for _, dir := range []string{root, filepath.Join(root, "tl")} {
		keys, err := seal.BucketKeys(ctx, open(dir, keyRing(t, "k1", "k2")))
		if err != nil || len(keys) != 2 { // tl/_tierlog/keys and tl/_wal/_tierlog/keys
			t.Fatalf("%s: %+v %v", dir, keys, err)
		}
	}
	if _, err := seal.Rekey(ctx, open(filepath.Join(root, "tl"), keyRing(t, "k1", "k2")), seal.RekeyOptions{}); err != nil {
		t.Fatal(err)
	}
	checkRestore(t, open(root, keyRing(t, "k2")), want, "tl/classic-0")
}

// TestSealedTamperedChunkIsNotRestoredAgain: a restore (and verify's deep
// check, which downloads the same way) of an object with a tampered chunk
// fails at once, naming the object and the chunk: not a retryable error
// (it was: the body "cut short 5 times", fetched each time).
func TestSealedTamperedChunkIsNotRestoredAgain(t *testing.T) {
	inner := mem.New()
	fillBucket(t, sealedStore(t, inner, keyRing(t, "k1")))
	raw := objstore.New(inner, "raw", objstore.Options{})
	var key string
	raw.List(ctx, "tl/classic-0/", func(o objstore.ObjectInfo) bool {
		if strings.HasSuffix(o.Key, ".log") {
			key = o.Key
			return false
		}
		return true
	})
	data, err := raw.ReadAll(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	data[seal.HeaderSize+100] ^= 1
	if _, err := inner.Put(ctx, key, bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	store := sealedStore(t, inner, keyRing(t, "k1"))
	_, err = tiered.Restore(ctx, store, "tl/classic-0", filepath.Join(t.TempDir(), "classic-0"), tiered.RestoreOptions{})
	var oe *seal.ObjectError
	if !errors.As(err, &oe) || oe.Object != key || oe.Chunk != 0 || !errors.Is(err, backend.ErrCorruptRecord) || errors.Is(err, objstore.ErrRetryable) {
		t.Fatalf("restore of a tampered object: %v", err)
	}
}
