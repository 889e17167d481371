// Package broker is a small, single-node broker that speaks Kafka's wire
// protocol on tierlog: the reference example of a broker embedding a
// backend.Backend, and the harness tierlog's end-to-end tests and
// benchmarks drive with a real Kafka client (franz-go's kgo). It is an
// example, not a product: one node, no replication, no security.
//
// # Files
//
//	broker.go    Options, Start, Close; the topics and their partitions
//	conn.go      one goroutine a connection: frames, headers, responses
//	apis.go      the API versions served, and the dispatch
//	errors.go    backend errors to Kafka error codes (the one mapping)
//	metadata.go  Metadata, CreateTopics, DeleteTopics
//	produce.go   Produce
//	fetch.go     Fetch: reads, the long poll in the purgatory, zero-copy
//	             responses (fetchwrite.go frames them)
//	offsets.go   ListOffsets, DeleteRecords, OffsetForLeaderEpoch
//	txn.go       InitProducerID and the transaction coordinator
//	             (transactions.json)
//	groups.go    the group coordinator (classic protocol)
//	offsetlog.go committed offsets in the __consumer_offsets topic
//	state.go     topics.json, written whole
//
// # What lives where (under Options.Dir)
//
//	logs/                 the local.Backend log directory (Kafka's layout);
//	                      __consumer_offsets-0 is a topic like any other,
//	                      cleanup.policy=compact, cleaned by the Cleaner
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
// # Leader epochs
//
// One node leads every partition, but not at one epoch forever: each
// start is a leader election, as a restart is in a Kafka cluster. Start
// leads each topic's partitions at the epoch topics.json recorded for the
// topic at the last start plus one, and never below one past the largest
// epoch the partitions' own logs hold records of (EndOffsetForEpoch, over
// both tiers: a directory restored from elsewhere, or a topics.json from
// an older broker). The new epoch is written to topics.json before any
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
// acks=1 is answered after the append. With flush.messages=1 an append is
// durable when it is acknowledged.
//
// # Concurrency
//
// Each connection runs one request at a time, in order, as Kafka's
// broker does (it mutes a connection until its response is sent). A
// partition's appends, DeleteRecords and high watermark moves are
// serialized by partition.mu. Lock order: txnCoordinator.mu, then offsetLog.mu, then
// Broker.mu or partition.mu (Broker.mu is held only to look topics up,
// create or delete them). groupCoordinator.mu is taken alone: a JoinGroup
// or SyncGroup waits for the rebalance after releasing it, and an offset
// commit writes after releasing it.
// Long-poll fetches and acks=-1 produces park in two purgatories keyed by
// partition; a goroutine a partition waits on Partition.Changed, moves the
// high watermark and calls CheckAndComplete on both.
package broker
