// Package broker is a small, single-node broker that speaks Kafka's wire
// protocol on tierlog: the reference example of a broker embedding a
// backend.Backend, and the harness tierlog's end-to-end tests and
// benchmarks drive with a real Kafka client (franz-go's kgo). It is an
// example, not a product: one node, no replication, no security.
//
// # Files
//
//	broker.go    Options, Start, Close; the accept loop; the partitions'
//	             high watermark watchers
//	topics.go    opening, creating and deleting topics (the partition
//	             caps; the file I/O outside Broker.mu)
//	conn.go      one goroutine a connection: frames, headers, responses;
//	             the idle close (Options.ConnectionsMaxIdle); a connection
//	             quiet for a second drops its buffers
//	memory.go    the bound on request bytes in flight
//	             (Options.QueuedMaxRequestBytes); Stats
//	apis.go      the API versions served, and the dispatch
//	errors.go    backend errors to Kafka error codes (the one mapping)
//	metadata.go  Metadata, CreateTopics, DeleteTopics
//	produce.go   Produce; acks=-1 parked in the purgatory until the high
//	             watermark passes it
//	fetch.go     Fetch: reads (a Fetch's remote reads side by side), the
//	             long poll in the purgatory, zero-copy responses
//	             (fetchwrite.go frames them)
//	offsets.go   ListOffsets, DeleteRecords, OffsetForLeaderEpoch
//	txn.go       InitProducerID and the transaction coordinator
//	             (transactions.json)
//	groups.go    the group coordinator (classic protocol)
//	admingroups.go     ListGroups, DescribeGroups, DeleteGroups, OffsetDelete
//	adminconfigs.go    DescribeConfigs, AlterConfigs,
//	                   IncrementalAlterConfigs (topic configs kept in
//	                   topics.json, applied with Partition.SetConfig)
//	admincluster.go    DescribeCluster, ElectLeaders, DescribeProducers,
//	                   DescribeTransactions, ListTransactions
//	offsetlog.go committed offsets in the __consumer_offsets topic
//	state.go     topics.json, written whole
//
// # What lives where (under Options.Dir)
//
//	logs/                 the log directory (Kafka's layout), a
//	                      local.Backend, or with Options.Store a
//	                      tiered.Backend over one; __consumer_offsets-0 is
//	                      a topic like any other, cleanup.policy=compact,
//	                      cleaned by the Cleaner (never tiered)
//	topics.json           every topic: partition count, config overrides
//	                      and the leader epoch of the last start
//	transactions.json     the next producer id block and each transactional
//	                      id's producer id, epoch and open transaction
//
// Both JSON files are written whole: tmp, fsync, rename, fsync the
// directory. __consumer_offsets holds Kafka's own offset commit records
// (key version 1: group, topic, partition; value version 3: offset,
// leader epoch, metadata, commit timestamp), so Kafka's tools read it;
// a null value (a tombstone) deletes a commit.
//
// With Options.Store, the bucket holds the tiered topics' closed segments
// under <StorePrefix>/<topic>-<partition>/ (the tiered package's layout
// and manifest).
//
// # Tiered topics
//
// With Options.Store (--store URL) the broker opens its log directory with
// tiered.OpenBackend: topics with remote.storage.enable=true are tiered
// partitions, the others local logs, side by side. The tiering service
// (Kafka's RemoteLogManager, configured by Kafka's remote.log.manager.*
// and remote.log.reader.* properties: Options.RemoteLogManager,
// --broker-config) uploads each closed segment once the high watermark
// passes it, of the partitions this broker leads (all of them: see
// Leader epochs), then deletes local copies as local.retention.* says.
// A Fetch below the local log start is read from the bucket by the
// partition; a Fetch's remote reads run side by side, each reading ahead
// twice what the Fetch asked of its partition, 1 MiB at least
// (Options.RemoteReadAheadBytes). A bucket that is down (or a
// reader pool that is full) is a retryable backend.ErrStorage:
// KAFKA_STORAGE_ERROR, which clients retry; local offsets are served
// meanwhile, and the broker starts without the bucket. The cleaner works
// on the local directory underneath (tiered.Backend.Local), on the
// topics that are not tiered; a compacted tiered topic is cleaned in the
// bucket by the tiering service (tiered.Partition.CompactRemote, as its
// segments leave the disk; --broker-config
// remote.log.compaction.dedupe.buffer.size and
// remote.log.compaction.max.bytes.per.second size its map and budget).
// Without Options.Store a tiered topic is refused with INVALID_CONFIG.
//
// # Read replicas
//
// With Options.ReadReplicaOf (--read-replica-of URL) the broker serves,
// read-only, the tiered topics another broker keeps in that bucket
// (under ReadReplicaPrefix): it lists the bucket for partitions with a
// manifest at Start and every ReplicaDiscoveryInterval, opens each as a
// read replica (tiered.BackendOptions.ReadReplica) without leading it,
// and serves Fetch, ListOffsets and OffsetsForLeaderEpoch from the
// bucket, each partition following its origin's commits every task
// interval (1 s unless --broker-config sets
// remote.log.manager.task.interval.ms). Produce to those topics, a
// transaction taking them, DeleteRecords, config changes, CreateTopics
// and DeleteTopics are refused with POLICY_VIOLATION; consumer groups
// work (__consumer_offsets is the replica's own, local). A topic its
// origin deleted is not served; a partition that holds records of the
// replica's own is refused. Each discovery lists every object under the
// prefix (by default every 30 s). It writes nothing to the bucket.
//
// # Leader epochs
//
// One node leads every partition, but not at one epoch forever: each
// start is a leader election, as a restart is in a Kafka cluster. Start
// leads each topic's partitions at the epoch topics.json recorded for the
// topic at the last start plus one, and never below one past the largest
// epoch the partitions' local logs hold records of (their epoch caches:
// a directory restored from elsewhere, or a topics.json from an older
// broker; the bucket is not read, so the broker starts without it). The new epoch is written to topics.json before any
// partition leads at it, so epochs never go backwards, even when a start
// appends nothing (the log's epoch cache forgets an epoch without
// records when it reopens; topics.json does not). A topic created leads
// at epoch 0 (or above its directory's epochs). Start then calls
// BecomeLeader(epoch) on every partition it opens, local and tiered
// alike, before the first append: the local log records where the epoch
// starts, and a tiered partition starts uploading (its first upload
// claims the bucket's manifest at that epoch, fencing an older writer).
// Appends are stamped with the epoch; Metadata, ListOffsets and
// OffsetForLeaderEpoch answer with it, and a request whose current leader
// epoch is older is FENCED_LEADER_EPOCH (the client refreshes its
// metadata), newer UNKNOWN_LEADER_EPOCH.
//
// # The high watermark and acks=-1
//
// One node is the whole in-sync replica set, so the high watermark is the
// log end; but it moves as Kafka's does, after the append and apart from
// it. Each partition has a watcher goroutine that waits on
// Partition.Changed; when the log end moves it advances the high
// watermark to it (advanceHighWatermark, the one place that moves it),
// then completes the parked requests of the partition: acks=-1 Produces
// (and the coordinators' writes) whose batches are now below the high
// watermark, and long-poll Fetches with something new. An acks=-1 Produce
// waits in the purgatory until then or its timeout (REQUEST_TIMED_OUT);
// acks=1 is answered after the append (for a diskless topic, whose log is
// a cache, once the bucket holds the batch, as acks=-1). With
// flush.messages=1 an append is durable when it is acknowledged.
//
// # Concurrency
//
// Each connection runs one request at a time, in order, and answers in
// order, as Kafka's broker does (it mutes a connection until its
// response is sent), with one difference: a Produce whose answer waits
// for the high watermark is appended and then waits beside the next
// requests, up to five of them (pipeline.go), so that a producer with
// several requests in flight keeps moving while each waits for its
// replicas or its bucket; a request other than a Produce waits until
// every earlier answer is written. A client that never reads its answers
// holds at most five; a write that stalls for Options.ConnectionsMaxIdle
// closes the connection. Before it reads
// a request's body a connection takes the body's size from the broker's
// request memory (Options.QueuedMaxRequestBytes) and gives it back once
// the request is answered; requestMemory.mu is taken alone. A
// partition's appends, DeleteRecords and high watermark moves are
// serialized by partition.mu. Lock order: txnCoordinator.mu, then
// offsetLog.mu, then Broker.configMu (topic config changes), then
// Broker.mu, then partition.mu (Broker.mu is held only
// to look topics up, and to reserve, publish or unpublish a topic that is
// created or deleted: the file I/O in between runs without it, with the
// topic's name held in Broker.creating so no other creation or deletion
// of that name runs meanwhile). groupCoordinator.mu is taken
// alone: a JoinGroup or SyncGroup waits for the rebalance after releasing
// it, and an offset commit writes after releasing it. Long-poll fetches
// and acks=-1 produces park in two purgatories keyed by partition; a
// goroutine a partition waits on Partition.Changed, moves the high
// watermark and calls CheckAndComplete on both. The coordinators wait for
// the high watermark holding their own locks; the watcher that completes
// the wait takes only partition.mu and Broker.mu (to read), never theirs.
//
// # What a broker still writes itself
//
// docs/embedding.md ("The reference broker") lists what this broker had
// to write that the library could give, and what it gives now.
package broker
