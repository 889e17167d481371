// Package tiered keeps a partition's closed segments in an object store and
// serves reads of old offsets from there, through the same two-step lookup
// as the local log: the manifest (segment by base offset) then the
// segment's remote offset index (fetched once, cached).
//
// A Partition wraps a local.Log. Offload uploads closed segments below the
// last stable offset (.log, trimmed .index and .timeindex, and the
// segment's producer snapshot, leader epochs and .txnindex, each with its
// CRC-32C, under keys unique per attempt), then commits the manifest with
// a conditional put; only then may local retention delete the local
// copies. A commit that loses the conditional put means another writer
// owns the partition: this one is fenced and uploads and deletes nothing
// more.
//
// A broker uses a Backend (OpenBackend): a log directory whose topics with
// remote.storage.enable=true open as Partitions sharing one set of caches,
// one upload quota and one remote reader pool, with a background service
// doing Kafka's RemoteLogManager's work (service.go). Only the leader of a
// partition writes to its bucket prefix; leadership and fencing are
// described in leader.go. Opening needs no bucket: a partition attaches to
// it when first needed. A manifest that went back in time (a restored
// bucket backup, a versioning rollback) is refused, and the partition goes
// offline deleting nothing (rollback.go).
//
// # Files
//
//	doc.go       this design
//	tiered.go    Partition: Open, Append, truncation, DeleteRecordsBefore, Close
//	view.go      the view: one immutable picture of offsets and tiers per call
//	tiers.go     the stack of tiers, and the reads that walk it (Read,
//	             OffsetForTimestamp, aborted transactions, leader epochs);
//	             the local tier
//	remote.go    the bucket tier: step 1 (manifest), a segment's batches,
//	             remote indexes, timestamps; LookupRemote for tools
//	locate.go    step 2 (remote offset index) and the window reader
//	prefetch.go  read-ahead across segment borders
//	offsets.go   Offsets, the tiered end, fitting the local start
//	offload.go   uploads of closed segments (Offload, CopyTurn)
//	commit.go    the conditional manifest commit and its reconciliation
//	backup.go    manifest backups and their restore
//	retention.go total retention over the bucket (ApplyRetention)
//	leader.go    attaching, roles, fencing, claiming the bucket
//	rollback.go  the tier-state record; refusing a manifest gone back in time
//	restore.go   rebuilding a partition directory from the bucket
//	gc.go        removing objects no commit can name
//	verify.go    checking a bucket against its manifest (CheckBucket)
//	diskless.go  diskless partitions (diskless.enable=true): appends into
//	             the Backend's WAL writer (package wal), the durable end,
//	             the claim that fences the writer before and rebuilds the
//	             tail from the bucket
//	cache.go     the byte-bounded LRU; shared.go the caches partitions share
//	backend.go   Backend; service.go its copier, expiration and reader pools
//	config.go, limits.go, metrics.go   configuration, quotas, counters
//
// # Offsets, the view and the stack of tiers
//
// A partition's offsets have two owners, each publishing atomically: the
// local log its own (log start, high watermark, last stable offset, log
// end: local.Log.Offsets) and this package the committed manifest
// (Partition.man, replaced whole by each commit and by attach). The
// remote log start is the manifest's; the local log only persists it in
// its log-start-offset-checkpoint (as Kafka's does), so a broker that
// opens without the bucket still answers the partition's log start.
//
// Every read, timestamp lookup, epoch lookup and aborted-transaction scan
// takes one view (view.go) and decides from it alone: which tier serves
// its offset, the bound of its isolation, the segments it walks. It never
// takes a second snapshot halfway. The two races a view cannot rule out
// come back from the tier as errViewMoved, and Read takes a new view (at
// most viewTries): local retention dropping a segment the view still
// reads locally, and total retention deleting a segment of the bucket
// the view still names (a 404 while the committed manifest has moved
// past the view's; a 404 of a segment the current manifest names is a
// storage error).
//
// The tiers are a stack, oldest offsets first (Partition.tiers):
//
//	bucketTier   [log start, local log start)   remote: attach, reader pool
//	localTier    [local log start, log end]
//
// In a view each tier serves from its start up to the next tier's start.
// A walk starts at the tier holding its offset and hands on to the next
// where one holds nothing more (a bucket with no segment at or after the
// offset below the local start), never back up. A third tier (objects in
// the bucket written before segments close) is one more implementation
// of tier and one more entry in the stack; the broker sees none of it:
// it asks the Partition, which asks the stack.
//
// # The life of a segment across the tiers
//
//  1. Appended to the local log's active segment; closed by size
//     (segment.bytes), age (segment.ms) or the idle roll.
//  2. Once wholly below the last stable offset, Offload uploads its
//     objects under keys unique to the attempt, after an upload intent
//     that lets gc remove an attempt no commit names.
//  3. A conditional put of the manifest naming it commits it; its backup
//     follows (backup.go). From the commit on, the bucket tier serves it
//     and the view's bucket range reaches into the local one.
//  4. Local retention (local.retention.ms/bytes) deletes the local copy
//     once the bucket is seen to hold the same bytes and the commit's
//     backup exists: the local log start moves past it, and the bucket
//     tier alone serves it.
//  5. Total retention (retention.ms/bytes) or DeleteRecordsBefore commits a
//     manifest with a higher log start first, then deletes the objects
//     (retention.go); gc removes what no commit can name.
//
// # A read of an offloaded offset, from the broker's Fetch to the store
//
// The reference broker's Fetch (examples/broker/broker/fetch.go,
// Broker.readFetch) calls backend.Partition.Read on each partition; it
// asks ReadWaits only to run the reads that wait on the network side by
// side. Then, each step below the one before, none going back up (but for
// the one bounded step back to Read that errViewMoved takes: a first read
// of the manifest, or a tier that moved past the view, makes Read take a
// new view and start again, at most viewTries times):
//
//  1. Partition.Read (tiers.go) checks the partition is open and takes a
//     view: the local offsets, then the manifest.
//  2. readView: tierOf picks the bucket tier (the offset is below the
//     local log start); below the view's log start is an out-of-range; a
//     replica's fetch gets OffsetMovedToTieredStorageError; a partition
//     not attached reads its manifest and takes a new view. A slot of the
//     remote reader pool is taken.
//  3. readFrom calls bucketTier.read with the offset and the local start
//     as its end. Step 1 of the lookup: Manifest.Find, a binary search
//     of the segments by base offset.
//  4. readSegment calls locate (locate.go). Step 2: remoteIndex returns
//     the segment's offset index from the memory cache, the disk cache
//     or one GET (checked against the size and CRC-32C the manifest
//     recorded); OffsetIndexView.LookupSlot picks the entry at or below
//     the offset.
//  5. window returns bytes of the .log from the entry's position: from
//     the chunk cache, the read-ahead in flight, or one ranged GET
//     (objstore.Store.ReadAll: attempts under the store's deadlines and
//     retries, the driver's Get), whose batches are walked as they
//     arrive (walkBatches: headers read, order checked) and kept with
//     the chunk.
//  6. locate scans the batches to the one holding the offset, by what
//     the walk on arrival read of them (else their headers,
//     record.HeaderAt), checking the order of those the walk did not
//     and the first against the offset before it; readSegment takes
//     whole batches up to MaxBytes and the view's read bound for the
//     isolation (where the window ends at a batch's end, on into the
//     cached range from there, lent in place as a second piece), checks
//     the next batch's header where the walk did not (checkNext), and
//     starts read-ahead (prefetch: from a batch's start, walked as it
//     lands, and to one where the offset index shows it).
//  7. A read_committed read collects the aborted transactions from the
//     same view, down the stack (abortedFor). The memRecords go back to
//     the broker, which writes them into the response (WriteTo).
//
// # Locks
//
// In the order they may be taken:
//
//	Backend.mu        the open partitions; held across a partition's Open,
//	                  which reads nothing from the bucket under it
//	local.Backend.mu  (the local log directory's; see package local)
//	Partition.mu      serializes Offload, retention, DeleteRecordsBefore,
//	                  leadership changes and every manifest commit
//	Partition.attachMu  serializes the first read of the manifest; its
//	                  waiters give up when their ctx ends or Close begins
//	diskless.mu       a diskless partition's appends, truncation and
//	                  the claim's rebuild of its tail
//	bucketRecord.mu   the tier-state record; held across its file's write
//	local.Log's locks (see package local), then the caches' lru.mu
//
// diskless.ownMu and diskless.hwMu are leaves; the WAL writer's
// callback (Backend.settled) takes only them, Backend.dlMu (a leaf) and
// the local log's locks. service.mu is taken alone: the copier and
// expiration pools take a partition off the queue under it and call into
// the partition without it. The caches' locks (lru.mu, and diskCache.mu
// over the disk cache's queue of writes) are leaves: nothing is called
// under them but the lru's eviction callbacks, which take no lock.
// Readers take no lock of the partition once it is attached: a view
// loads atomics, and the remote reader pool is a semaphore (a channel);
// the first read that needs the bucket takes attachMu to read the
// manifest. A method named …Locked requires Partition.mu.
//
// # Failures
//
// Nothing local is deleted before the bucket is known to hold the same
// bytes under a committed manifest whose backup exists. A failure to reach
// the bucket is a retryable backend.ErrStorage and deletes nothing; a
// commit whose answer was lost is reconciled at the next change; a lost
// conditional put fences the writer. Damage read from the bucket (a batch
// out of order, an index or object whose size or CRC-32C differs from the
// manifest's) is backend.ErrCorruptRecord naming the object and position,
// never a wrong answer. A manifest that went back in time takes the
// partition offline, deleting nothing, until an operator decides.
package tiered
