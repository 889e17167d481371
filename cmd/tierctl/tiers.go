package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/local"
)

// errInBucket: an offset asked of a partition opened without --store is
// below its local files, in the bucket it was offloaded to.
var errInBucket = errors.New("offloaded to a bucket")

// bucketRange returns the offsets [from, to) of l that live only in a
// bucket, by its log-start checkpoint: ok is false when the log starts at
// its local files.
func bucketRange(l *local.Log) (from, to int64, ok bool) {
	rs, ok := l.Segments().RemoteLogStart()
	to = l.Offsets().LogStart
	return rs, to, ok && rs < to
}

// inBucketError is the usage error for offset off of the partition in dir
// when the bucket, not the local files, holds it; nil when it does not.
func inBucketError(dir string, l *local.Log, off int64) error {
	from, to, ok := bucketRange(l)
	if !ok || off < from || off >= to {
		return nil
	}
	return usageError{fmt.Errorf("offset %d of %s is %w: the partition starts at %d (log-start-offset-checkpoint), its local files at %d; "+
		"read offsets %d..%d with --store URL", off, dir, errInBucket, from, to, from, to-1)}
}

// noteInBucket tells, on stderr, that the offsets of l below its local
// files are in a bucket, and that --store does what (e.g. "reads them").
func noteInBucket(cmd *cobra.Command, dir string, l *local.Log, what string) {
	if from, to, ok := bucketRange(l); ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: offsets %d..%d of %s are in a bucket, not in its local files (which start at %d): --store URL %s\n",
			from, to-1, dir, to, what)
	}
}
