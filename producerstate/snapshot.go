package producerstate

import (
	"encoding/binary"
	"hash/crc32"
	"strconv"
	"strings"
)

// Producer snapshot format constants (frozen: Kafka's ProducerSnapshot v1,
// storage/src/main/resources/message/ProducerSnapshot.json).
const (
	SnapshotVersion    = 1
	SnapshotHeaderSize = 10 // version int16 + crc uint32 + count int32
	SnapshotEntrySize  = 46
	SnapshotSuffix     = ".snapshot"

	snapOffCRC     = 2
	snapOffCount   = 6
	snapCRCFrom    = 6 // the CRC covers bytes 6..end: the count and the entries
	fileNameDigits = 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnapshotEntry is one producer in a .snapshot file. Kafka keeps only the
// last batch of each producer here: LastSequence, LastOffset, OffsetDelta
// and Timestamp describe that batch (LastOffset -1: none), and Timestamp is
// also the producer's last timestamp.
type SnapshotEntry struct {
	ProducerID       int64
	Epoch            int16
	LastSequence     int32
	LastOffset       int64
	OffsetDelta      int32
	Timestamp        int64
	CoordinatorEpoch int32
	// CurrentTxnFirstOffset is the first offset of the producer's open
	// transaction, -1 when none.
	CurrentTxnFirstOffset int64
}

// EncodeSnapshot appends the .snapshot encoding of entries to dst, in the
// order given, and returns the extended slice.
func EncodeSnapshot(dst []byte, entries []SnapshotEntry) []byte {
	start := len(dst)
	dst = appendSnapshotHeader(dst, len(entries))
	for i := range entries {
		dst = appendSnapshotEntry(dst, &entries[i])
	}
	finishSnapshot(dst[start:])
	return dst
}

func appendSnapshotHeader(dst []byte, count int) []byte {
	dst = binary.BigEndian.AppendUint16(dst, SnapshotVersion)
	dst = binary.BigEndian.AppendUint32(dst, 0) // CRC, filled by finishSnapshot
	return binary.BigEndian.AppendUint32(dst, uint32(count))
}

func appendSnapshotEntry(dst []byte, e *SnapshotEntry) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.ProducerID))
	dst = binary.BigEndian.AppendUint16(dst, uint16(e.Epoch))
	dst = binary.BigEndian.AppendUint32(dst, uint32(e.LastSequence))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.LastOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(e.OffsetDelta))
	dst = binary.BigEndian.AppendUint64(dst, uint64(e.Timestamp))
	dst = binary.BigEndian.AppendUint32(dst, uint32(e.CoordinatorEpoch))
	return binary.BigEndian.AppendUint64(dst, uint64(e.CurrentTxnFirstOffset))
}

// finishSnapshot writes the CRC-32C of snap[6:] into snap[2:6].
func finishSnapshot(snap []byte) {
	binary.BigEndian.PutUint32(snap[snapOffCRC:], crc32.Checksum(snap[snapCRCFrom:], castagnoli))
}

// checkSnapshot validates data as a whole .snapshot file and returns its
// entry count. The count is checked against the length before anything is
// sized by it.
func checkSnapshot(data []byte) (int, error) {
	if len(data) < SnapshotHeaderSize {
		return 0, snapErr(0, "%d bytes, shorter than the %d-byte header", len(data), SnapshotHeaderSize)
	}
	if v := int16(binary.BigEndian.Uint16(data)); v != SnapshotVersion {
		return 0, snapErr(0, "unknown version %d (want %d)", v, SnapshotVersion)
	}
	stored := binary.BigEndian.Uint32(data[snapOffCRC:])
	if got := crc32.Checksum(data[snapCRCFrom:], castagnoli); got != stored {
		return 0, snapErr(snapOffCRC, "crc mismatch: stored 0x%08x, computed 0x%08x over bytes %d..%d", stored, got, snapCRCFrom, len(data))
	}
	count := int32(binary.BigEndian.Uint32(data[snapOffCount:]))
	if count < 0 {
		return 0, snapErr(snapOffCount, "negative entry count %d", count)
	}
	room := (len(data) - SnapshotHeaderSize) / SnapshotEntrySize
	if int64(count) > int64(room) {
		return 0, snapErr(snapOffCount, "entry count %d needs %d bytes, the file has %d", count,
			SnapshotHeaderSize+int64(count)*SnapshotEntrySize, len(data))
	}
	if want := SnapshotHeaderSize + int(count)*SnapshotEntrySize; want != len(data) {
		return 0, snapErr(want, "%d trailing bytes after %d entries", len(data)-want, count)
	}
	return int(count), nil
}

// snapshotEntryAt decodes entry i of a snapshot checkSnapshot accepted.
func snapshotEntryAt(data []byte, i int) SnapshotEntry {
	b := data[SnapshotHeaderSize+i*SnapshotEntrySize:]
	b = b[:SnapshotEntrySize]
	return SnapshotEntry{
		ProducerID:            int64(binary.BigEndian.Uint64(b[0:])),
		Epoch:                 int16(binary.BigEndian.Uint16(b[8:])),
		LastSequence:          int32(binary.BigEndian.Uint32(b[10:])),
		LastOffset:            int64(binary.BigEndian.Uint64(b[14:])),
		OffsetDelta:           int32(binary.BigEndian.Uint32(b[22:])),
		Timestamp:             int64(binary.BigEndian.Uint64(b[26:])),
		CoordinatorEpoch:      int32(binary.BigEndian.Uint32(b[34:])),
		CurrentTxnFirstOffset: int64(binary.BigEndian.Uint64(b[38:])),
	}
}

// DecodeSnapshot decodes a whole .snapshot file. It returns a *FormatError
// matching ErrCorruptSnapshot when the bytes are short, the version is not
// 1, the CRC-32C does not match, or the entry count does not account for
// exactly the bytes given (Kafka ignores bytes after the last entry as long
// as the CRC covers them; tierlog refuses them, so a decoded snapshot always
// re-encodes to the same bytes).
func DecodeSnapshot(data []byte) ([]SnapshotEntry, error) {
	n, err := checkSnapshot(data)
	if err != nil {
		return nil, err
	}
	out := make([]SnapshotEntry, n)
	for i := range out {
		out[i] = snapshotEntryAt(data, i)
	}
	return out, nil
}

// SnapshotFileName returns the name of the snapshot describing the log up
// to (not including) offset: 20 digits and ".snapshot".
func SnapshotFileName(offset int64) string {
	return paddedOffset(offset) + SnapshotSuffix
}

// ParseSnapshotFileName returns the offset in a snapshot file name and
// whether name is one: decimal digits (Kafka writes 20) and ".snapshot".
func ParseSnapshotFileName(name string) (int64, bool) {
	return parseOffsetName(name, SnapshotSuffix)
}

func paddedOffset(offset int64) string {
	s := strconv.FormatInt(offset, 10)
	if len(s) >= fileNameDigits {
		return s
	}
	return strings.Repeat("0", fileNameDigits-len(s)) + s
}

func parseOffsetName(name, suffix string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, suffix)
	if !ok || digits == "" {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	off, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return off, true
}
