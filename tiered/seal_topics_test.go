package tiered_test

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/mem"
	"github.com/tierlog/tierlog/objstore/seal"
	"github.com/tierlog/tierlog/record"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// selectiveStore is a store over inner that seals only what its user
// asks (a URL's seal=topics), in 4 KiB chunks.
func selectiveStore(t testing.TB, inner objstore.Driver, ring seal.KeyRing) *objstore.Store {
	t.Helper()
	d, err := seal.New(inner, ring, seal.Options{ChunkSize: seal.MinChunkSize, Selective: true})
	if err != nil {
		t.Fatal(err)
	}
	return objstore.New(d, "selective", objstore.Options{})
}

// publicValue is a plaintext topic's value, which the bucket shows.
var publicValue = []byte("tierlog-public-value-0123456789-")

// The topics of TestSealedTopicsOnly: two sealed, two not; two classic,
// two diskless.
var sealTopics = []struct {
	name     string
	sealed   bool
	diskless bool
}{
	{"secret", true, false}, {"open", false, false},
	{"dsecret", true, true}, {"dopen", false, true},
}

func sealTopicCfg(t *testing.T, sealed, diskless bool) backend.Config {
	kv := ordersCfg
	if diskless {
		kv = disklessCfg
	}
	if sealed {
		kv = append(kv[:len(kv):len(kv)], "remote.storage.seal.enable", "true")
	}
	return cfg(t, kv...)
}

// openSealTopics opens sealTopics' partitions on b, each leading at
// epoch 1.
func openSealTopics(t *testing.T, b *tiered.Backend) map[string]*tiered.Partition {
	t.Helper()
	out := map[string]*tiered.Partition{}
	for _, tc := range sealTopics {
		bp, err := b.Open(ctx, tc.name, 0, sealTopicCfg(t, tc.sealed, tc.diskless))
		if err != nil {
			t.Fatal(err)
		}
		p := bp.(*tiered.Partition)
		if err := p.BecomeLeader(ctx, 1); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		out[tc.name] = p
	}
	return out
}

// produceTopic appends 30 batches of 20 records of value to p, leading at
// epoch 1, and offloads what it can.
func produceTopic(t *testing.T, p *tiered.Partition, value []byte) {
	t.Helper()
	var rb record.Builder
	for range 30 {
		rb.Reset(record.NewBatchHeader())
		for range 20 {
			rb.Append(1_700_000_000_000, []byte("k"), bytes.Repeat(value, 4), nil)
		}
		batch, err := rb.Build()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Append(ctx, batch, backend.AppendOptions{AssignOffsets: true, LeaderEpoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if p.Diskless() {
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.SetHighWatermark(p.Offsets().LogEnd); err != nil {
		t.Fatal(err)
	}
	if err := p.Roll(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Offload(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSealedTopicsOnly: a Backend over a store that seals only the
// topics that ask (seal=topics) seals every object of the topics with
// remote.storage.seal.enable=true and every WAL object, leaves the other
// topics' objects in plaintext, and reads every topic back after a
// restart; no sealed topic's value is anywhere in the bucket.
func TestSealedTopicsOnly(t *testing.T) {
	inner := mem.New()
	dir := filepath.Join(t.TempDir(), "broker")
	b := openDisklessBackend(t, dir, selectiveStore(t, inner, keyRing(t, "k1")))
	want := map[string]map[int64][]byte{}
	for name, p := range openSealTopics(t, b) {
		value := publicValue
		if strings.Contains(name, "secret") {
			value = secretValue
		}
		produceTopic(t, p, value)
		want[name] = batchesFrom(t, p, 0)
	}
	// The Backend's store counts every partition's requests, sealed or
	// not (what a metrics exporter is given).
	if puts := b.Store().Stats().Requests[objstore.OpPut]; puts < 40 {
		t.Fatalf("the Backend's store counted %d PUTs", puts)
	}
	b.Close()

	// WAL gc reads the WAL objects through the sealing store (their
	// sizes listed right: no HEAD) and the manifests of both kinds
	// through the Backend's.
	sd, err := seal.Sealed(selectiveStore(t, inner, keyRing(t, "k1")))
	if err != nil {
		t.Fatal(err)
	}
	walStore := objstore.New(sd.Sealing(), "sealing", objstore.Options{})
	objs, err := tiered.GCWAL(ctx, walStore, "tl", tiered.WALGCOptions{Grace: 1, Force: true, DryRun: true,
		Manifests: objstore.New(sd, "selective", objstore.Options{})})
	if err != nil || len(objs) == 0 {
		t.Fatalf("WAL gc: %d objects, %v", len(objs), err)
	}
	for _, o := range objs {
		if o.Damaged != nil {
			t.Fatalf("WAL gc: %s damaged: %v", o.Key, o.Damaged)
		}
	}
	if heads := walStore.Stats().Requests[objstore.OpHead]; heads != 0 {
		t.Fatalf("WAL gc made %d HEADs", heads)
	}
	// Listed through a store that is not sealed, the WAL folder's
	// bucket key is no WAL object (nor a damaged one).
	raw := objstore.New(inner, "raw", objstore.Options{})
	listed, err := tiered.ListWAL(ctx, raw, "tl")
	if err != nil || len(listed) != len(objs) {
		t.Fatalf("ListWAL through the raw store: %d objects (%v), want %d", len(listed), err, len(objs))
	}
	// Nor is a sealed WAL object a damaged one there: it needs the key.
	if _, err := wal.ReadFooter(ctx, raw, listed[0].Key, listed[0].Size); !errors.Is(err, seal.ErrSealedObject) {
		t.Fatalf("a sealed WAL object's footer read without the key: %v", err)
	}

	seen := map[string]int{}
	if err := raw.List(ctx, "", func(o objstore.ObjectInfo) bool {
		data, err := raw.ReadAll(ctx, o.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		isSealed := seal.LooksSealed(data)
		if bytes.Contains(data, secretValue[:16]) {
			t.Errorf("%s holds a sealed topic's value", o.Key)
		}
		folder := strings.Split(o.Key, "/")[1]
		switch {
		case strings.Contains(o.Key, seal.KeyDir):
			folder = "keys"
		case folder == wal.Dir || strings.HasPrefix(folder, "secret-") || strings.HasPrefix(folder, "dsecret-"):
			if !isSealed {
				t.Errorf("%s is not sealed", o.Key)
			}
		case isSealed:
			t.Errorf("%s, a plaintext topic's, is sealed", o.Key)
		}
		seen[folder]++
		if folder == "open-0" && bytes.Contains(data, publicValue[:16]) {
			seen["open value"]++
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("objects by folder: %v", seen)
	for _, f := range []string{"secret-0", "open-0", "dsecret-0", "dopen-0", wal.Dir, "keys", "open value"} {
		if seen[f] == 0 {
			t.Errorf("no object of %s in the bucket: the test tests nothing there (%v)", f, seen)
		}
	}

	// A restart reads every topic back, from the bucket where the local
	// copies went.
	b = openDisklessBackend(t, dir, selectiveStore(t, inner, keyRing(t, "k1")))
	for name, p := range openSealTopics(t, b) {
		checkBatches(t, name+" after a restart", batchesFrom(t, p, 0), want[name])
	}
	b.Close()
}

// TestSealedTopicsRefusals: what a topic's sealing cannot be, each an
// error naming remote.storage.seal.enable: asked for with no key ring
// (at open, or changed to); changed on a tiered topic where it decides
// the objects' kind (seal=topics; under seal=all it may change); a topic
// opened with the other setting than its partition in the bucket was
// created with, either way.
func TestSealedTopicsRefusals(t *testing.T) {
	wantConfig := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), "remote.storage.seal.enable") {
			t.Fatalf("%s: %v, want ErrInvalidConfig naming remote.storage.seal.enable", what, err)
		}
	}
	plain := openTieredBackend(t, t.TempDir(), objstore.New(mem.New(), "plain", objstore.Options{}), tiered.BackendOptions{})
	defer plain.Close()
	_, err := plain.Open(ctx, "secret", 0, sealTopicCfg(t, true, false))
	wantConfig("a sealed topic with no key ring", err)
	var ce *backend.ConfigError
	if !errors.As(err, &ce) || ce.Key != "remote.storage.seal.enable" || !strings.Contains(err.Error(), "key-file") {
		t.Fatalf("no key ring: %v, want a ConfigError saying to give key-file", err)
	}

	// With no key ring, a tiered topic cannot turn it on either.
	bp, err := plain.Open(ctx, "open", 0, sealTopicCfg(t, false, false))
	if err != nil {
		t.Fatal(err)
	}
	wantConfig("turning sealing on with no key ring", bp.SetConfig(sealTopicCfg(t, true, false)))
	// Where every object is sealed (seal=all), the setting changes
	// nothing and may change.
	all := openTieredBackend(t, t.TempDir(), sealedStore(t, mem.New(), keyRing(t, "k1")), tiered.BackendOptions{})
	defer all.Close()
	if bp, err = all.Open(ctx, "any", 0, sealTopicCfg(t, false, false)); err != nil {
		t.Fatal(err)
	}
	if err := bp.SetConfig(sealTopicCfg(t, true, false)); err != nil {
		t.Fatalf("seal=all: turning the setting on: %v", err)
	}
	if err := bp.SetConfig(sealTopicCfg(t, false, false)); err != nil {
		t.Fatalf("seal=all: turning the setting off: %v", err)
	}

	inner := mem.New()
	b := openDisklessBackend(t, filepath.Join(t.TempDir(), "a"), selectiveStore(t, inner, keyRing(t, "k1")))
	defer b.Close()
	parts := openSealTopics(t, b)
	for _, p := range parts {
		produceTopic(t, p, publicValue)
	}
	wantConfig("turning sealing off", parts["secret"].SetConfig(sealTopicCfg(t, false, false)))
	wantConfig("turning sealing on", parts["open"].SetConfig(sealTopicCfg(t, true, false)))

	// Another broker (its own disk) opening the topics with the other
	// setting: refused once it reads the bucket, classic or diskless.
	other := openDisklessBackend(t, filepath.Join(t.TempDir(), "b"), selectiveStore(t, inner, keyRing(t, "k1")))
	defer other.Close()
	for _, tc := range sealTopics {
		bp, err := other.Open(ctx, tc.name, 0, sealTopicCfg(t, !tc.sealed, tc.diskless))
		if err == nil {
			if err = bp.(*tiered.Partition).BecomeLeader(ctx, 2); err == nil {
				err = bp.(*tiered.Partition).Attach(ctx)
			}
		}
		wantConfig(tc.name+" opened with the other setting", err)
	}
}

// TestSealedTopicDeletedAndCreatedPlain: a sealed topic deleted (open, or
// by a Backend that never opened it) leaves a sealed deleted manifest,
// and a topic of its name created without sealing takes the name over,
// in plaintext; and the other way round.
func TestSealedTopicDeletedAndCreatedPlain(t *testing.T) {
	inner := mem.New()
	raw := objstore.New(inner, "raw", objstore.Options{})
	manifestSealed := func(name string) bool {
		data, err := raw.ReadAll(ctx, "tl/"+name+"-0/manifest", 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		return seal.LooksSealed(data)
	}
	b := openTieredBackend(t, t.TempDir(), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{})
	defer b.Close()
	create := func(name string, sealed bool) map[int64][]byte {
		t.Helper()
		bp, err := b.Open(ctx, name, 0, sealTopicCfg(t, sealed, false))
		if err != nil {
			t.Fatal(err)
		}
		p := bp.(*tiered.Partition)
		if err := p.BecomeLeader(ctx, 1); err != nil {
			t.Fatalf("%s (sealed %v): %v", name, sealed, err)
		}
		produceTopic(t, p, publicValue)
		if manifestSealed(name) != sealed {
			t.Fatalf("%s: manifest sealed %v, want %v", name, !sealed, sealed)
		}
		return batchesFrom(t, p, 0)
	}
	for _, sealed := range []bool{true, false} {
		create("t", sealed)
		if err := b.Delete(ctx, "t", 0); err != nil {
			t.Fatal(err)
		}
		if manifestSealed("t") != sealed {
			t.Fatalf("deleted while open: the deleted manifest's kind changed (sealed %v)", sealed)
		}
		want := create("t", !sealed)
		if got := batchesFrom(t, mustOpen(t, b, "t", !sealed), 0); len(got) != len(want) {
			t.Fatalf("recreated: %d batches, want %d", len(got), len(want))
		}
	}
	// Deleted by a Backend that never opened it: the kind is read from
	// the bucket.
	create("u", true)
	fresh := openTieredBackend(t, t.TempDir(), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{})
	defer fresh.Close()
	if err := fresh.Delete(ctx, "u", 0); err != nil && !errors.Is(err, backend.ErrNotFound) {
		t.Fatal(err)
	}
	if !manifestSealed("u") {
		t.Fatal("a sealed partition deleted by a Backend that never opened it has a plaintext manifest")
	}
	n := 0
	if err := raw.List(ctx, "tl/u-0/", func(objstore.ObjectInfo) bool { n++; return true }); err != nil || n != 1 {
		t.Fatalf("%d objects left of the deleted partition (%v), want its manifest", n, err)
	}
}

// writeTopic writes a partition of topic name, sealed or not, into inner
// through a seal=topics Backend of its own (closed after), leading at
// epoch 1, and returns its manifest's generation.
func writeTopic(t *testing.T, inner objstore.Driver, name string, sealed bool, value []byte) uint64 {
	t.Helper()
	b := openTieredBackend(t, t.TempDir(), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{})
	defer b.Close()
	p := mustOpen(t, b, name, sealed)
	if err := p.BecomeLeader(ctx, 1); err != nil {
		t.Fatal(err)
	}
	produceTopic(t, p, value)
	return p.Head().Generation()
}

func mustOpen(t *testing.T, b *tiered.Backend, name string, sealed bool) *tiered.Partition {
	t.Helper()
	bp, err := b.Open(ctx, name, 0, sealTopicCfg(t, sealed, false))
	if err != nil {
		t.Fatal(err)
	}
	return bp.(*tiered.Partition)
}

// TestSealedTopicForgedDeletedManifest: a plaintext manifest saying
// "deleted", put over a sealed partition's by someone without the keys,
// is refused by a sealed topic while the partition's objects remain,
// rather than taken as a deleted partition (its data hidden, the topic
// started over empty).
func TestSealedTopicForgedDeletedManifest(t *testing.T) {
	inner := mem.New()
	gen := writeTopic(t, inner, "s", true, secretValue)
	data, err := (&manifest.Manifest{Generation: gen + 1, WriterEpoch: 1, Deleted: true}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	raw := objstore.New(inner, "raw", objstore.Options{})
	if _, err := raw.Put(ctx, "tl/s-0/manifest", bytes.NewReader(data), int64(len(data)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b := openTieredBackend(t, filepath.Join(t.TempDir(), "b"), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{})
	defer b.Close()
	q := mustOpen(t, b, "s", true)
	err = q.BecomeLeader(ctx, 2)
	if err == nil {
		err = q.Attach(ctx)
	}
	if !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), "objects of the partition remain") {
		t.Fatalf("a forged plaintext deleted manifest over a sealed partition: %v", err)
	}
}

// TestSealTopicsOverPlaintextDisklessWAL: a bucket whose diskless topic
// wrote plaintext WAL objects, taken over (its old broker still up) by
// one whose URL gained key-file and seal=topics: with read-plaintext=true
// the new leader reads the plaintext tail; without it, it says the WAL
// object is not sealed.
func TestSealTopicsOverPlaintextDisklessWAL(t *testing.T) {
	for _, readPlaintext := range []bool{true, false} {
		inner := mem.New()
		b := openDisklessBackend(t, filepath.Join(t.TempDir(), "old"), objstore.New(inner, "plain", objstore.Options{}))
		p := openDiskless(t, b, 1)
		for range 5 {
			if _, err := appendOne(t, p, 10, "x"); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		want := batchesFrom(t, p, 0)
		d, err := seal.New(inner, keyRing(t, "k1"), seal.Options{ChunkSize: seal.MinChunkSize, Selective: true, ReadPlaintext: readPlaintext})
		if err != nil {
			t.Fatal(err)
		}
		nb := openDisklessBackend(t, filepath.Join(t.TempDir(), "new"), objstore.New(d, "selective", objstore.Options{}))
		bp, err := nb.Open(ctx, "orders", 0, cfg(t, disklessCfg...))
		if err != nil {
			t.Fatal(err)
		}
		q := bp.(*tiered.Partition)
		if err = q.BecomeLeader(ctx, 2); err == nil {
			err = q.Ready(ctx)
		}
		switch {
		case readPlaintext && err != nil:
			t.Fatalf("read-plaintext: %v", err)
		case readPlaintext:
			checkBatches(t, "the new leader", batchesFrom(t, q, 0), want)
		case !errors.Is(err, seal.ErrNotSealed):
			t.Fatalf("without read-plaintext: %v, want ErrNotSealed", err)
		}
		nb.Close()
		b.Close()
	}
}

// TestRefusedSealLeavesTheLocalLog: a local topic that asks to become a
// sealed tiered one on a Backend with no key ring is refused, and its
// open log goes on as it was.
func TestRefusedSealLeavesTheLocalLog(t *testing.T) {
	b := openTieredBackend(t, t.TempDir(), objstore.New(mem.New(), "plain", objstore.Options{}), tiered.BackendOptions{})
	defer b.Close()
	lp, err := b.Open(ctx, "t", 0, cfg(t, "segment.bytes", "16384"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendOne(t, lp, 1, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(ctx, "t", 0, sealTopicCfg(t, true, false)); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a sealed topic with no key ring: %v", err)
	}
	if _, err := appendOne(t, lp, 1, "b"); err != nil {
		t.Fatalf("the local log after the refusal: %v", err)
	}
	if c := lp.(interface{ Config() backend.Config }).Config(); c.RemoteStorageEnable || c.SealEnable {
		t.Fatalf("the refused config was applied: %+v", c)
	}
}

// TestDeleteTopicOfTheOtherKind: a topic opened with the other setting
// than its partition in the bucket (refused for it) is still deleted,
// in the kind its objects are.
func TestDeleteTopicOfTheOtherKind(t *testing.T) {
	inner := mem.New()
	writeTopic(t, inner, "t", false, publicValue)
	b := openTieredBackend(t, filepath.Join(t.TempDir(), "b"), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{})
	defer b.Close()
	q := mustOpen(t, b, "t", true)
	if err := q.BecomeLeader(ctx, 2); err == nil {
		if err := q.Attach(ctx); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Fatalf("opened with the other setting: %v", err)
		}
	}
	if err := b.Delete(ctx, "t", 0); err != nil {
		t.Fatalf("delete: %v", err)
	}
	raw := objstore.New(inner, "raw", objstore.Options{})
	data, err := raw.ReadAll(ctx, "tl/t-0/manifest", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := manifest.DecodeHead(data)
	if err != nil || !h.Deleted() {
		t.Fatalf("the manifest after the delete: %v (plaintext, deleted, wanted)", err)
	}
}

// TestOpenRefusesASelectiveStore: tiered.Open given a store that seals
// only the topics that ask, with no word on which this partition is,
// refuses it (it would write a sealed partition in plaintext); the store
// tiered.PartitionStore returns is taken.
func TestOpenRefusesASelectiveStore(t *testing.T) {
	inner := mem.New()
	s := selectiveStore(t, inner, keyRing(t, "k1"))
	l, err := local.Open(filepath.Join(t.TempDir(), "p-0"), local.Options{Config: cfg(t), LogStartOffset: -1, HighWatermark: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := tiered.Open(ctx, l, tiered.Options{Store: s, Prefix: "tl/p-0"}); !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), "PartitionStore") {
		t.Fatalf("a selective store: %v", err)
	}
	ps, err := tiered.PartitionStore(ctx, s, "tl/p-0", true)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiered.Open(ctx, l, tiered.Options{Store: ps, Prefix: "tl/p-0", LeaderEpoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := tiered.CommitSegments(ctx, p, synthSegments(0, 2, 1_700_000_000_000)); err != nil {
		t.Fatal(err)
	}
	if data, err := objstore.New(inner, "raw", objstore.Options{}).ReadAll(ctx, "tl/p-0/manifest", 0, -1); err != nil || !seal.LooksSealed(data) {
		t.Fatalf("the partition PartitionStore sealed has a plaintext manifest: %v", err)
	}
	// Now its manifest is sealed: a topic that does not ask gets the
	// sealing store; with no key ring, asking is refused.
	if again, err := tiered.PartitionStore(ctx, s, "tl/p-0", false); err != nil {
		t.Fatal(err)
	} else if sd, err := seal.Sealed(again); err != nil || sd.Selective() {
		t.Fatalf("a sealed partition's store: %v", err)
	}
	if _, err := tiered.PartitionStore(ctx, objstore.New(inner, "plain", objstore.Options{}), "tl/p-0", true); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("asking with no key ring: %v", err)
	}
}

// TestSealTopicsReadReplica: a read replica over a seal=topics store,
// which learns its topics from the bucket and not their configs (it
// opens them with remote.storage.seal.enable unset), serves sealed and
// plaintext partitions alike.
func TestSealTopicsReadReplica(t *testing.T) {
	inner := mem.New()
	b := openTieredBackend(t, filepath.Join(t.TempDir(), "origin"), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{})
	want := map[string]map[int64][]byte{}
	for _, name := range []string{"secret", "open"} {
		p := mustOpen(t, b, name, name == "secret")
		if err := p.BecomeLeader(ctx, 1); err != nil {
			t.Fatal(err)
		}
		produceTopic(t, p, publicValue)
		want[name] = batchesFrom(t, p, 0)
		if len(want[name]) == 0 || p.Offsets().LocalLogStart == 0 {
			t.Fatalf("%s: nothing offloaded", name)
		}
	}
	b.Close()
	r := openTieredBackend(t, filepath.Join(t.TempDir(), "replica"), selectiveStore(t, inner, keyRing(t, "k1")),
		tiered.BackendOptions{ReadReplica: true})
	defer r.Close()
	for _, name := range []string{"secret", "open"} {
		bp, err := r.Open(ctx, name, 0, sealTopicCfg(t, false, false))
		if err != nil {
			t.Fatal(err)
		}
		checkBatches(t, name+" on the replica", batchesFrom(t, bp, 0), want[name])
	}
}

// TestMismatchLoggedOnce: a partition the service cannot attach (here a
// topic opened with the other setting than its bucket partition) is
// logged once, not at every task interval.
func TestMismatchLoggedOnce(t *testing.T) {
	inner := mem.New()
	writeTopic(t, inner, "t", false, publicValue)
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	b := openTieredBackend(t, filepath.Join(t.TempDir(), "b"), selectiveStore(t, inner, keyRing(t, "k1")), tiered.BackendOptions{Logger: logger})
	defer b.Close()
	q := mustOpen(t, b, "t", true)
	if err := q.BecomeLeader(ctx, 2); err != nil {
		t.Fatal(err)
	}
	const line = "does not fit its objects in the bucket"
	for deadline := time.Now().Add(time.Minute); !strings.Contains(logs.String(), line); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the mismatch was not logged in a minute:\n%s", logs.String())
		}
	}
	time.Sleep(500 * time.Millisecond) // more passes of 20 ms task intervals
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("the mismatch was logged %d times, want once:\n%s", n, logs.String())
	}
}
