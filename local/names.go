package local

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tierlog/tierlog/backend"
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

// MaxTopicLength is Kafka's limit on topic names (249: a partition
// directory name plus its suffixes must stay under 255 bytes).
const MaxTopicLength = 249

// ValidateTopic applies Kafka's topic name rules: 1 to 249 characters of
// [a-zA-Z0-9._-], and not "." or "..". Errors wrap backend.ErrInvalidName.
func ValidateTopic(topic string) error {
	if topic == "" || topic == "." || topic == ".." {
		return fmt.Errorf("%w: topic %q", backend.ErrInvalidName, topic)
	}
	if len(topic) > MaxTopicLength {
		return fmt.Errorf("%w: topic of %d characters (at most %d)", backend.ErrInvalidName, len(topic), MaxTopicLength)
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: topic %q has character %q (want a-z, A-Z, 0-9, '.', '_', '-')", backend.ErrInvalidName, topic, c)
		}
	}
	return nil
}

// PartitionDirName returns "<topic>-<partition>" after validating both.
func PartitionDirName(topic string, partition int32) (string, error) {
	if err := ValidateTopic(topic); err != nil {
		return "", err
	}
	if partition < 0 {
		return "", fmt.Errorf("%w: partition %d", backend.ErrInvalidName, partition)
	}
	return fmt.Sprintf("%s-%d", topic, partition), nil
}

// ParsePartitionDirName splits "<topic>-<partition>" at its last '-', as
// Kafka does.
func ParsePartitionDirName(name string) (TopicPartition, error) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 {
		return TopicPartition{}, fmt.Errorf("%w: directory %q is not <topic>-<partition>", backend.ErrInvalidName, name)
	}
	p, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || p < 0 {
		return TopicPartition{}, fmt.Errorf("%w: directory %q has partition %q", backend.ErrInvalidName, name, name[i+1:])
	}
	if err := ValidateTopic(name[:i]); err != nil {
		return TopicPartition{}, err
	}
	return TopicPartition{Topic: name[:i], Partition: int32(p)}, nil
}
