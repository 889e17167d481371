package local

import (
	"fmt"
	"strconv"
	"strings"
)

// File suffixes of a Kafka log directory (frozen: Kafka's LogFileUtils).
const (
	LogSuffix       = ".log"
	IndexSuffix     = ".index"
	TimeIndexSuffix = ".timeindex"
	TxnIndexSuffix  = ".txnindex"
	SnapshotSuffix  = ".snapshot"

	// Temporary suffixes, appended after a segment suffix
	// ("00000000000000000000.log.deleted").
	DeletedSuffix = ".deleted"
	CleanedSuffix = ".cleaned"
	SwapSuffix    = ".swap"
)

// FileName returns Kafka's name for a file of the segment based at base:
// the offset as 20 zero-padded digits, then suffix.
func FileName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// ParseFileName splits a segment file name into its base offset and the rest
// of the name (".log", ".index.deleted", …). As Kafka does, the base offset
// is the text before the first '.'; it must be 20 digits.
func ParseFileName(name string) (base int64, suffix string, err error) {
	dot := strings.IndexByte(name, '.')
	if dot < 0 {
		return 0, "", fmt.Errorf("local: %q is not a segment file name (no suffix)", name)
	}
	digits := name[:dot]
	if len(digits) != 20 {
		return 0, "", fmt.Errorf("local: %q is not a segment file name (want 20 digits before the suffix)", name)
	}
	base, perr := strconv.ParseInt(digits, 10, 64)
	if perr != nil || base < 0 {
		return 0, "", fmt.Errorf("local: %q is not a segment file name (bad offset %q)", name, digits)
	}
	return base, name[dot:], nil
}
