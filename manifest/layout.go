package manifest

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The bucket key layout: the one place that formats and parses the names
// of a partition's objects (see the package doc's table). Every key is
//
//	[<root>/]<topic>-<partition>/<name>
//
// where <name> is one of
//
//	manifest                                       KindManifest
//	<base 20d>-<last 20d>-<id 16 hex><suffix>      a segment's object, suffix by kind
//	<id 16 hex>.intent                             KindIntent, an upload intent
//	manifest.<generation 20d>                      KindManifestBackup, a committed generation's copy
//	<base 20d>-<last 20d>-<id 16 hex>.part         KindPart, a part of a layered manifest
//
// The names are frozen: a bucket written by one release is read by the
// next.

// ErrBadKey means a key or object name is not one the layout formats.
var ErrBadKey = errors.New("manifest: not a bucket key of the layout")

// Kind is the kind of a partition's bucket object.
type Kind uint8

// The kinds of bucket object, in the order of the package doc's table.
const (
	KindManifest       Kind = iota + 1 // the partition's manifest
	KindLog                            // a segment's records (.log)
	KindIndex                          // a segment's offset index (.index)
	KindTimeIndex                      // a segment's time index (.timeindex)
	KindTxnIndex                       // a segment's aborted transactions (.txnindex), when it has any
	KindSnapshot                       // the producer state at the segment's last+1 (.snapshot)
	KindEpochs                         // the leader epochs up to the segment's end (.leader-epoch-checkpoint)
	KindIntent                         // an upload intent naming the objects of an upload in flight (.intent)
	KindManifestBackup                 // a committed manifest generation's copy (manifest.<generation>), never overwritten
	KindPart                           // a part of the manifest: a run of older segments (.part), never overwritten
)

// ManifestName is the name of a partition's manifest object.
const ManifestName = "manifest"

// IntentSuffix ends the name of an upload intent.
const IntentSuffix = ".intent"

// BackupPrefix begins the name of a manifest backup.
const BackupPrefix = ManifestName + "."

// kindInfo is what the layout knows of a kind: its name in reports and
// docs, and the suffix of its object names (the whole name for the
// manifest).
var kindInfo = [...]struct{ name, suffix string }{
	KindManifest:  {"manifest", ManifestName},
	KindLog:       {"log", LogSuffix},
	KindIndex:     {"index", IndexSuffix},
	KindTimeIndex: {"timeindex", TimeIndexSuffix},
	KindTxnIndex:  {"txnindex", TxnIndexSuffix},
	KindSnapshot:  {"snapshot", SnapshotSuffix},
	KindEpochs:    {"leader-epoch-checkpoint", EpochsSuffix},
	KindIntent:    {"intent", IntentSuffix},
	// A backup's name begins with BackupPrefix; it has no suffix.
	KindManifestBackup: {"backup", ""},
	KindPart:           {"part", PartSuffix},
}

// Kinds lists every kind of bucket object.
func Kinds() []Kind {
	return []Kind{KindManifest, KindLog, KindIndex, KindTimeIndex, KindTxnIndex, KindSnapshot, KindEpochs, KindIntent, KindManifestBackup, KindPart}
}

// String is the kind's name ("log", "snapshot", ...).
func (k Kind) String() string {
	if k.valid() {
		return kindInfo[k].name
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Suffix is the suffix of the kind's object names ("manifest" for the
// manifest, whose whole name it is).
func (k Kind) Suffix() string {
	if k.valid() {
		return kindInfo[k].suffix
	}
	return ""
}

// Segment says whether objects of the kind belong to a segment.
func (k Kind) Segment() bool { return k >= KindLog && k <= KindEpochs }

func (k Kind) valid() bool { return k >= KindManifest && k <= KindPart }

// KindOfSuffix returns the segment object kind whose names end in suffix
// (one of AllSuffixes).
func KindOfSuffix(suffix string) (Kind, bool) {
	for k := KindLog; k <= KindEpochs; k++ {
		if kindInfo[k].suffix == suffix {
			return k, true
		}
	}
	return 0, false
}

// Object is an object's name within its partition, parsed.
type Object struct {
	Kind Kind
	// BaseOffset and LastOffset are a segment object's or a part's offsets
	// (0 for the manifest, backups and intents).
	BaseOffset, LastOffset int64
	// ID is a segment object's upload attempt, a part's id, or an intent's
	// id (zero for the manifest).
	ID [8]byte
	// Generation is a manifest backup's generation (0 for the others).
	Generation uint64
}

// SegmentObject is the object of kind k of segment s.
func SegmentObject(s Segment, k Kind) Object {
	return Object{Kind: k, BaseOffset: s.BaseOffset, LastOffset: s.LastOffset, ID: s.ID}
}

// Name formats the object's name within its partition.
func (o Object) Name() string {
	switch {
	case o.Kind == KindManifest:
		return ManifestName
	case o.Kind == KindIntent:
		return hex.EncodeToString(o.ID[:]) + IntentSuffix
	case o.Kind == KindManifestBackup:
		return fmt.Sprintf("%s%020d", BackupPrefix, o.Generation)
	case o.Kind.Segment() || o.Kind == KindPart:
		return segmentName(o.BaseOffset, o.LastOffset, o.ID, o.Kind.Suffix())
	}
	return ""
}

func segmentName(base, last int64, id [8]byte, suffix string) string {
	var buf [80]byte
	return string(appendSegmentName(buf[:0], base, last, id, suffix))
}

// appendSegmentName appends a segment object's name to b: the base and
// last offsets as %020d formats them, the upload id in hex, the suffix.
// A remote read builds two or three keys; this builds each in one
// allocation (fmt.Sprintf took five).
func appendSegmentName(b []byte, base, last int64, id [8]byte, suffix string) []byte {
	b = appendOffset(b, base)
	b = append(b, '-')
	b = appendOffset(b, last)
	b = append(b, '-')
	b = hex.AppendEncode(b, id[:])
	return append(b, suffix...)
}

// appendOffset appends v as %020d does.
func appendOffset(b []byte, v int64) []byte {
	if v < 0 {
		return fmt.Appendf(b, "%020d", v) // no segment has one; the same text all the same
	}
	var d [20]byte
	digits := strconv.AppendInt(d[:0], v, 10)
	for range 20 - len(digits) {
		b = append(b, '0')
	}
	return append(b, digits...)
}

// KeyError is a key or name the layout does not parse, and why.
type KeyError struct {
	Key    string
	Reason string
}

func (e *KeyError) Error() string { return fmt.Sprintf("%v: %q: %s", ErrBadKey, e.Key, e.Reason) }

// Unwrap makes errors.Is(err, ErrBadKey) hold.
func (e *KeyError) Unwrap() error { return ErrBadKey }

func badKey(key, format string, args ...any) error {
	return &KeyError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// segmentStem is the length of <base 20d>-<last 20d>-<id 16 hex>.
const segmentStem = 20 + 1 + 20 + 1 + 16

// ParseName parses an object's name within its partition. Only the names
// Object.Name formats parse: ParseName(n).Name() == n.
func ParseName(name string) (Object, error) {
	switch {
	case name == ManifestName:
		return Object{Kind: KindManifest}, nil
	case strings.HasPrefix(name, BackupPrefix):
		digits := name[len(BackupPrefix):]
		gen, err := strconv.ParseUint(digits, 10, 64)
		if len(digits) != 20 || err != nil || digits[0] == '+' {
			return Object{}, badKey(name, "a manifest backup is manifest.<generation, 20 decimal digits>")
		}
		return Object{Kind: KindManifestBackup, Generation: gen}, nil
	case strings.HasSuffix(name, IntentSuffix):
		id, ok := parseID(strings.TrimSuffix(name, IntentSuffix))
		if !ok {
			return Object{}, badKey(name, "an upload intent's id is not 16 lowercase hex digits")
		}
		return Object{Kind: KindIntent, ID: id}, nil
	}
	if len(name) <= segmentStem {
		return Object{}, badKey(name, "neither the manifest, an upload intent nor a segment object")
	}
	stem, suffix := name[:segmentStem], name[segmentStem:]
	k, ok := KindOfSuffix(suffix)
	if suffix == PartSuffix {
		k, ok = KindPart, true
	}
	if !ok {
		return Object{}, badKey(name, "suffix %q is no segment object's", suffix)
	}
	if stem[20] != '-' || stem[41] != '-' {
		return Object{}, badKey(name, "a segment object is <base 20d>-<last 20d>-<id 16 hex>%s", suffix)
	}
	base, ok1 := parseOffset(stem[:20])
	last, ok2 := parseOffset(stem[21:41])
	id, ok3 := parseID(stem[42:])
	switch {
	case !ok1 || !ok2:
		return Object{}, badKey(name, "a segment object's offsets are not 20 decimal digits each")
	case !ok3:
		return Object{}, badKey(name, "a segment object's id is not 16 lowercase hex digits")
	case last < base:
		return Object{}, badKey(name, "last offset %d below base offset %d", last, base)
	}
	return Object{Kind: k, BaseOffset: base, LastOffset: last, ID: id}, nil
}

func parseOffset(s string) (int64, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

func parseID(s string) (id [8]byte, ok bool) {
	if len(s) != 16 {
		return id, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return id, false
		}
	}
	_, err := hex.Decode(id[:], []byte(s))
	return id, err == nil
}

// Key is a bucket key, parsed.
type Key struct {
	// Root is the prefix above the partition ("" for none).
	Root      string
	Topic     string
	Partition int32
	Object
}

// String formats the key.
func (k Key) String() string {
	return PartitionLayout(k.Root, k.Topic, k.Partition).Key(k.Object)
}

// ParseKey parses a whole bucket key, [<root>/]<topic>-<partition>/<name>.
// Only the keys Key.String formats parse: ParseKey(s).String() == s.
func ParseKey(key string) (Key, error) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return Key{}, badKey(key, "no <topic>-<partition>/ before the object name")
	}
	o, err := ParseName(key[i+1:])
	if err != nil {
		return Key{}, badKey(key, "%s", err.(*KeyError).Reason)
	}
	var k Key
	k.Object = o
	dir := key[:i]
	if j := strings.LastIndexByte(dir, '/'); j >= 0 {
		k.Root, dir = dir[:j], dir[j+1:]
		if k.Root == "" || k.Root[0] == '/' || k.Root[len(k.Root)-1] == '/' {
			return Key{}, badKey(key, "root prefix %q begins or ends with a slash, or is empty", k.Root)
		}
	}
	j := strings.LastIndexByte(dir, '-')
	if j <= 0 {
		return Key{}, badKey(key, "partition directory %q is not <topic>-<partition>", dir)
	}
	k.Topic = dir[:j]
	p, err := strconv.ParseInt(dir[j+1:], 10, 32)
	if err != nil || p < 0 || strconv.FormatInt(p, 10) != dir[j+1:] {
		return Key{}, badKey(key, "partition %q is not a partition number", dir[j+1:])
	}
	k.Partition = int32(p)
	if !validTopic(k.Topic) {
		return Key{}, badKey(key, "topic %q is not a Kafka topic name", k.Topic)
	}
	return k, nil
}

// validTopic is Kafka's rule for a topic name (local.ValidateTopic's).
func validTopic(t string) bool {
	if t == "" || t == "." || t == ".." || len(t) > 249 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Layout formats and parses the keys of one partition's objects: each is
// the partition's prefix, a slash, and the object's name (the name alone
// under an empty prefix).
type Layout struct {
	prefix string
}

// NewLayout is the layout of the partition whose objects are under
// prefix (its <root>/<topic>-<partition>, without a trailing slash).
func NewLayout(prefix string) Layout { return Layout{prefix: strings.TrimSuffix(prefix, "/")} }

// PartitionLayout is the layout of topic-partition under root ("" for
// none).
func PartitionLayout(root, topic string, partition int32) Layout {
	dir := topic + "-" + strconv.FormatInt(int64(partition), 10)
	if root = strings.Trim(root, "/"); root != "" {
		dir = root + "/" + dir
	}
	return Layout{prefix: dir}
}

// Prefix is the partition's prefix ("" for none).
func (l Layout) Prefix() string { return l.prefix }

// ListPrefix is what a listing of the partition's objects asks for: the
// prefix and a slash, or "" under an empty prefix.
func (l Layout) ListPrefix() string { return l.Join("") }

// Join is the key of the object named name under the partition.
func (l Layout) Join(name string) string {
	if l.prefix == "" {
		return name
	}
	return l.prefix + "/" + name
}

// Key formats the key of object o.
func (l Layout) Key(o Object) string { return l.Join(o.Name()) }

// Manifest is the key of the partition's manifest.
func (l Layout) Manifest() string { return l.Join(ManifestName) }

// Backup is the key of generation gen's manifest backup.
func (l Layout) Backup(gen uint64) string {
	return l.Key(Object{Kind: KindManifestBackup, Generation: gen})
}

// Intent is the key of the upload intent id.
func (l Layout) Intent(id [8]byte) string { return l.Key(Object{Kind: KindIntent, ID: id}) }

// Segment is the key of segment s's object with suffix (one of
// AllSuffixes).
func (l Layout) Segment(s Segment, suffix string) string {
	var buf [160]byte
	b := buf[:0]
	if l.prefix != "" {
		b = append(append(b, l.prefix...), '/')
	}
	return string(appendSegmentName(b, s.BaseOffset, s.LastOffset, s.ID, suffix))
}

// Part is the key of part p's object.
func (l Layout) Part(p Part) string { return l.Join(p.Name()) }

// Parse parses a key of the partition's objects.
func (l Layout) Parse(key string) (Object, error) {
	name, ok := strings.CutPrefix(key, l.ListPrefix())
	if !ok {
		return Object{}, badKey(key, "not under the partition's prefix %q", l.prefix)
	}
	o, err := ParseName(name)
	if err != nil {
		return Object{}, badKey(key, "%s", err.(*KeyError).Reason)
	}
	return o, nil
}
