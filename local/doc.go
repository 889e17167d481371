// Package local keeps partitions on local disk in Apache Kafka's log
// directory layout: <topic>-<partition> directories of segments named by
// their base offset (00000000000000000000.log, .index, .timeindex).
package local
