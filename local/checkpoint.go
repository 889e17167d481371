package local

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/vfs"
)

// Checkpoint file names (frozen: Kafka's).
const (
	RecoveryPointCheckpoint = "recovery-point-offset-checkpoint"
	LogStartCheckpoint      = "log-start-offset-checkpoint"
	ReplicationCheckpoint   = "replication-offset-checkpoint" // high watermarks
	CleanerCheckpoint       = "cleaner-offset-checkpoint"     // the log cleaner's first dirty offsets
	LeaderEpochCheckpoint   = "leader-epoch-checkpoint"
	PartitionMetadataFile   = "partition.metadata"
	CleanShutdownFile       = ".kafka_cleanshutdown"
	LockFile                = ".lock"
)

// ErrBadCheckpoint means a checkpoint file does not parse; it is wrapped
// with the file and line.
var ErrBadCheckpoint = errors.New("local: malformed checkpoint file")

// maxCheckpointEntries caps the entry count a checkpoint may declare before
// it sizes anything.
const maxCheckpointEntries = 10_000_000

// TopicPartition names a partition (backend.TopicPartition).
type TopicPartition = backend.TopicPartition

// parseCheckpoint reads Kafka's generic checkpoint format: a version line
// ("0"), a count line, then exactly count entry lines of fields separated by
// white space, each with nfields fields.
func parseCheckpoint(path string, data []byte, nfields int) ([][]string, error) {
	return parseCheckpointFields(path, data, nfields, nfields)
}

// parseCheckpointFields is parseCheckpoint for entries of minFields to
// maxFields fields (a file that gained a field keeps reading its older
// form).
func parseCheckpointFields(path string, data []byte, minFields, maxFields int) ([][]string, error) {
	bad := func(line int, format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s", ErrBadCheckpoint, path, line, fmt.Sprintf(format, args...))
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 4096), 1<<20)
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return strings.TrimSpace(sc.Text()), true
	}
	v, ok := next()
	if !ok {
		return nil, bad(1, "empty file")
	}
	if v != "0" {
		return nil, bad(line, "version %q, want 0", v)
	}
	c, ok := next()
	if !ok {
		return nil, bad(2, "no entry count")
	}
	count, err := strconv.Atoi(c)
	if err != nil || count < 0 || count > maxCheckpointEntries {
		return nil, bad(line, "entry count %q", c)
	}
	out := make([][]string, 0, min(count, 1024))
	for i := 0; i < count; i++ {
		l, ok := next()
		if !ok {
			return nil, bad(line+1, "%d entries declared, %d found", count, i)
		}
		f := strings.Fields(l)
		if len(f) < minFields || len(f) > maxFields {
			if minFields == maxFields {
				return nil, bad(line, "%d fields, want %d", len(f), minFields)
			}
			return nil, bad(line, "%d fields, want %d to %d", len(f), minFields, maxFields)
		}
		out = append(out, f)
	}
	for {
		l, ok := next()
		if !ok {
			break
		}
		if l != "" {
			return nil, bad(line, "more entries than the %d declared", count)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, bad(line, "%v", err)
	}
	return out, nil
}

// ReadOffsetCheckpoint reads a log-dir offset checkpoint
// ("topic partition offset" lines). A missing file is an empty map.
func ReadOffsetCheckpoint(path string) (map[TopicPartition]int64, error) {
	return readOffsetCheckpoint(vfs.Default, path)
}

func readOffsetCheckpoint(fsys vfs.FS, path string) (map[TopicPartition]int64, error) {
	data, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[TopicPartition]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local: read %s: %w", path, err)
	}
	rows, err := parseCheckpoint(path, data, 3)
	if err != nil {
		return nil, err
	}
	out := make(map[TopicPartition]int64, len(rows))
	for i, r := range rows {
		p, err1 := strconv.ParseInt(r[1], 10, 32)
		off, err2 := strconv.ParseInt(r[2], 10, 64)
		if err1 != nil || err2 != nil || p < 0 {
			return nil, fmt.Errorf("%w: %s entry %d: %q", ErrBadCheckpoint, path, i+1, strings.Join(r, " "))
		}
		out[TopicPartition{Topic: r[0], Partition: int32(p)}] = off
	}
	return out, nil
}

// WriteOffsetCheckpoint writes m durably in Kafka's format, sorted.
func WriteOffsetCheckpoint(dir, name string, m map[TopicPartition]int64) error {
	return writeOffsetCheckpoint(vfs.Default, dir, name, m)
}

func writeOffsetCheckpoint(fsys vfs.FS, dir, name string, m map[TopicPartition]int64) error {
	keys := make([]TopicPartition, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Topic != keys[j].Topic {
			return keys[i].Topic < keys[j].Topic
		}
		return keys[i].Partition < keys[j].Partition
	})
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(keys))
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d %d\n", k.Topic, k.Partition, m[k])
	}
	if err := vfs.WriteFileAtomic(fsys, dir, name, b.Bytes()); err != nil {
		return fmt.Errorf("local: write %s: %w", name, err)
	}
	return nil
}

// EpochEntry is one leader epoch and the first offset written in it.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

// ReadLeaderEpochCheckpoint reads a partition's leader-epoch-checkpoint. A
// missing file is an empty list.
func ReadLeaderEpochCheckpoint(path string) ([]EpochEntry, error) {
	return readLeaderEpochs(vfs.Default, path)
}

func readLeaderEpochs(fsys vfs.FS, path string) ([]EpochEntry, error) {
	e, _, err := readLeaderEpochFile(fsys, path)
	return e, err
}

// readLeaderEpochFile is ReadLeaderEpochCheckpoint that also says whether
// the file exists.
func readLeaderEpochFile(fsys vfs.FS, path string) ([]EpochEntry, bool, error) {
	data, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("local: read %s: %w", path, err)
	}
	e, err := parseLeaderEpochs(path, data)
	return e, true, err
}

func parseLeaderEpochs(path string, data []byte) ([]EpochEntry, error) {
	rows, err := parseCheckpoint(path, data, 2)
	if err != nil {
		return nil, err
	}
	out := make([]EpochEntry, 0, len(rows))
	for i, r := range rows {
		e, err1 := strconv.ParseInt(r[0], 10, 32)
		o, err2 := strconv.ParseInt(r[1], 10, 64)
		if err1 != nil || err2 != nil || e < 0 || o < 0 {
			return nil, fmt.Errorf("%w: %s entry %d: %q", ErrBadCheckpoint, path, i+1, strings.Join(r, " "))
		}
		if n := len(out); n > 0 && (int32(e) <= out[n-1].Epoch || o < out[n-1].StartOffset) {
			return nil, fmt.Errorf("%w: %s entry %d: epochs and offsets must increase", ErrBadCheckpoint, path, i+1)
		}
		out = append(out, EpochEntry{Epoch: int32(e), StartOffset: o})
	}
	return out, nil
}

// WriteLeaderEpochCheckpoint writes entries durably in Kafka's format.
func WriteLeaderEpochCheckpoint(dir string, entries []EpochEntry) error {
	return writeLeaderEpochs(vfs.Default, dir, entries)
}

func writeLeaderEpochs(fsys vfs.FS, dir string, entries []EpochEntry) error {
	if err := vfs.WriteFileAtomic(fsys, dir, LeaderEpochCheckpoint, FormatLeaderEpochs(entries)); err != nil {
		return fmt.Errorf("local: write %s: %w", LeaderEpochCheckpoint, err)
	}
	return nil
}

// FormatLeaderEpochs returns entries in leader-epoch-checkpoint's text
// format.
func FormatLeaderEpochs(entries []EpochEntry) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "0\n%d\n", len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "%d %d\n", e.Epoch, e.StartOffset)
	}
	return b.Bytes()
}

// ParseLeaderEpochs parses leader-epoch-checkpoint's text format; name is
// used in errors.
func ParseLeaderEpochs(name string, data []byte) ([]EpochEntry, error) {
	return parseLeaderEpochs(name, data)
}

// ReadPartitionMetadata returns the topic id in a partition.metadata file
// ("version: 0\ntopic_id: <base64url>"), or "" when the file is absent.
func ReadPartitionMetadata(path string) (string, error) {
	return readPartitionMetadata(vfs.Default, path)
}

func readPartitionMetadata(fsys vfs.FS, path string) (string, error) {
	data, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("local: read %s: %w", path, err)
	}
	var version, id string
	for i, l := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return "", fmt.Errorf("%w: %s line %d: %q", ErrBadCheckpoint, path, i+1, l)
		}
		switch strings.TrimSpace(k) {
		case "version":
			version = strings.TrimSpace(v)
		case "topic_id":
			id = strings.TrimSpace(v)
		default:
			return "", fmt.Errorf("%w: %s line %d: unknown field %q", ErrBadCheckpoint, path, i+1, k)
		}
	}
	if version != "0" || id == "" {
		return "", fmt.Errorf("%w: %s: version %q, topic id %q", ErrBadCheckpoint, path, version, id)
	}
	return id, nil
}

// WritePartitionMetadata writes partition.metadata as Kafka does (43 bytes
// for a 22-character id, no trailing newline).
func WritePartitionMetadata(dir, topicID string) error {
	return writePartitionMetadata(vfs.Default, dir, topicID)
}

func writePartitionMetadata(fsys vfs.FS, dir, topicID string) error {
	if err := vfs.WriteFileAtomic(fsys, dir, PartitionMetadataFile, []byte("version: 0\ntopic_id: "+topicID)); err != nil {
		return fmt.Errorf("local: write %s: %w", PartitionMetadataFile, err)
	}
	return nil
}
