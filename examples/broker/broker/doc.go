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
//	topics.json           every topic: partition count and config overrides
//	transactions.json     the next producer id block and each transactional
//	                      id's producer id, epoch and open transaction
//
// Both JSON files are written whole: tmp, fsync, rename, fsync the
// directory. __consumer_offsets holds Kafka's own offset commit records
// (key version 1: group, topic, partition; value version 3: offset,
// leader epoch, metadata, commit timestamp), so Kafka's tools read it;
// a null value (a tombstone) deletes a commit.
//
// # The high watermark
//
// One node is the whole in-sync replica set: after every append the broker
// moves the high watermark to the log end, under the partition's append
// lock, so acks=1 and acks=-1 answer after the same append; with
// flush.messages=1 the append is durable when it is acknowledged.
//
// # Concurrency
//
// Each connection runs one request at a time, in order, as Kafka's
// broker does (it mutes a connection until its response is sent). A
// partition's appends and high watermark moves are serialized by
// partition.mu. Lock order: txnCoordinator.mu, then offsetLog.mu, then
// Broker.mu or partition.mu (Broker.mu is held only to look topics up,
// create or delete them). groupCoordinator.mu is taken alone: a JoinGroup
// or SyncGroup waits for the rebalance after releasing it, and an offset
// commit writes after releasing it.
// Long-poll fetches park in a purgatory keyed by partition; a goroutine a
// partition waits on Partition.Changed and calls CheckAndComplete.
package broker
