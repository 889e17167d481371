package record

import (
	"encoding/binary"
	"hash/crc32"
)

// Legacy (magic 0/1) entry offsets, frozen.
const (
	legacyOffCRC        = 12
	legacyOffMagic      = 16
	legacyOffAttributes = 17
	legacyOffTimestamp  = 18 // magic 1 only
	legacyHeaderV0      = 18 // through attributes
	legacyHeaderV1      = 26 // through timestamp
	legacyAttrCodecMask = 0x07
	legacyAttrAppend    = 0x08
)

// LegacyEntry is a view over one magic 0 or 1 log entry (offset, size, then
// the message). Read only: tierlog never writes legacy formats.
type LegacyEntry []byte

// ParseLegacy returns the legacy entry at the start of buf, sized by its size
// field. It checks the minimum size, the magic and that the entry fits.
func ParseLegacy(buf []byte) (LegacyEntry, error) {
	if len(buf) < HeaderSizeToMagic {
		return nil, batchErr(ErrTornTail, -1, "%d bytes, need at least %d", len(buf), HeaderSizeToMagic)
	}
	off := int64(binary.BigEndian.Uint64(buf))
	size := int32(binary.BigEndian.Uint32(buf[8:]))
	magic := int8(buf[legacyOffMagic])
	if magic != 0 && magic != 1 {
		return nil, batchErr(ErrBadMagic, off, "magic %d in a legacy entry", magic)
	}
	if size < MinLegacySize {
		return nil, batchErr(ErrBadSize, off, "size %d is below the minimum %d", size, MinLegacySize)
	}
	total := int64(size) + LogOverhead
	if total > int64(len(buf)) {
		return nil, batchErr(ErrTornTail, off, "entry of %d bytes runs past the %d bytes given", total, len(buf))
	}
	e := LegacyEntry(buf[:total])
	if len(e) < e.headerSize()+8 {
		return nil, batchErr(ErrBadSize, off, "size %d is below the magic %d minimum", size, magic)
	}
	return e, nil
}

func (e LegacyEntry) headerSize() int {
	if e.Magic() == 0 {
		return legacyHeaderV0
	}
	return legacyHeaderV1
}

// Offset is the entry's offset: for a compressed wrapper, its LAST inner offset.
func (e LegacyEntry) Offset() int64      { return int64(binary.BigEndian.Uint64(e)) }
func (e LegacyEntry) Size() int          { return len(e) }
func (e LegacyEntry) CRC() uint32        { return binary.BigEndian.Uint32(e[legacyOffCRC:]) }
func (e LegacyEntry) Magic() int8        { return int8(e[legacyOffMagic]) }
func (e LegacyEntry) Attributes() int8   { return int8(e[legacyOffAttributes]) }
func (e LegacyEntry) Codec() Codec       { return Codec(e.Attributes() & legacyAttrCodecMask) }
func (e LegacyEntry) ComputeCRC() uint32 { return crc32.ChecksumIEEE(e[legacyOffMagic:]) }

// TimestampType is CreateTime or LogAppendTime (magic 1 only).
func (e LegacyEntry) TimestampType() TimestampType {
	if e.Magic() > 0 && e.Attributes()&legacyAttrAppend != 0 {
		return LogAppendTime
	}
	return CreateTime
}

// Timestamp is the message timestamp, or NoTimestamp for magic 0.
func (e LegacyEntry) Timestamp() int64 {
	if e.Magic() == 0 {
		return NoTimestamp
	}
	return int64(binary.BigEndian.Uint64(e[legacyOffTimestamp:]))
}

// KeyValue returns the key and value (nil when null).
func (e LegacyEntry) KeyValue() (key, value []byte, err error) {
	p := []byte(e[e.headerSize():])
	var ok bool
	if key, p, ok = readInt32Bytes(p); !ok {
		return nil, nil, batchErr(ErrBadRecord, e.Offset(), "legacy key length")
	}
	if value, p, ok = readInt32Bytes(p); !ok {
		return nil, nil, batchErr(ErrBadRecord, e.Offset(), "legacy value length")
	}
	if len(p) != 0 {
		return nil, nil, batchErr(ErrBadRecord, e.Offset(), "%d bytes after the legacy value", len(p))
	}
	return key, value, nil
}

// Validate checks the size, magic, codec and the CRC-32 (IEEE) over
// magic..end, and that key and value fit the entry.
func (e LegacyEntry) Validate() error {
	if stored, got := e.CRC(), e.ComputeCRC(); stored != got {
		return batchErr(ErrCRCMismatch, e.Offset(), "stored 0x%08x, computed 0x%08x (CRC-32)", stored, got)
	}
	if c := e.Codec(); c > LZ4 {
		return batchErr(ErrUnknownCodec, e.Offset(), "codec id %d in a magic %d entry", int(c), e.Magic())
	}
	_, _, err := e.KeyValue()
	return err
}

func readInt32Bytes(p []byte) (v, rest []byte, ok bool) {
	if len(p) < 4 {
		return nil, p, false
	}
	l := int32(binary.BigEndian.Uint32(p))
	p = p[4:]
	if l < -1 || int64(l) > int64(len(p)) {
		return nil, p, false
	}
	if l < 0 {
		return nil, p, true
	}
	return p[:l:l], p[l:], true
}

// legacyIter yields the messages of one legacy entry: the entry itself when
// uncompressed, else the inner messages of its compressed value.
type legacyIter struct {
	outer    LegacyEntry
	single   bool
	inner    []byte // remaining inner message set
	delta    int64  // added to each inner offset (magic 1 relative offsets)
	appendTs int64  // wrapper LogAppendTime, or -1
}

func (l *legacyIter) reset(e LegacyEntry, d *Decompressor) error {
	l.outer = e
	l.inner = nil
	l.delta = 0
	l.appendTs = -1
	if e.Codec() == None {
		l.single = true
		return nil
	}
	l.single = false
	if e.Codec() > LZ4 {
		return batchErr(ErrUnknownCodec, e.Offset(), "codec id %d in a magic %d entry", int(e.Codec()), e.Magic())
	}
	_, value, err := e.KeyValue()
	if err != nil {
		return err
	}
	raw, err := d.Decompress(e.Codec(), value)
	if err != nil {
		if be, ok := err.(*BatchError); ok {
			be.BaseOffset = e.Offset()
		}
		return err
	}
	l.inner = raw
	if e.Magic() == 1 {
		if e.TimestampType() == LogAppendTime {
			l.appendTs = e.Timestamp()
		}
		// Inner offsets are relative; the wrapper carries the absolute
		// offset of the last one.
		last := int64(-1)
		for p := raw; len(p) > 0; {
			in, err := ParseLegacy(p)
			if err != nil {
				return batchErr(ErrBadRecord, e.Offset(), "inner message: %v", err)
			}
			last = in.Offset()
			p = p[len(in):]
		}
		l.delta = e.Offset() - last
	}
	return nil
}

func (l *legacyIter) next(r *Record) (bool, error) {
	var m LegacyEntry
	off := int64(0)
	if l.single {
		if l.outer == nil {
			return false, nil
		}
		m, l.outer = l.outer, nil
		off = m.Offset()
	} else {
		if len(l.inner) == 0 {
			return false, nil
		}
		var err error
		m, err = ParseLegacy(l.inner)
		if err != nil {
			return false, batchErr(ErrBadRecord, l.outerOffset(), "inner message: %v", err)
		}
		l.inner = l.inner[len(m):]
		if err := m.Validate(); err != nil {
			return false, err
		}
		if m.Codec() != None {
			return false, batchErr(ErrBadRecord, l.outerOffset(), "nested compression in an inner message")
		}
		off = m.Offset() + l.delta
	}
	key, value, err := m.KeyValue()
	if err != nil {
		return false, err
	}
	r.Offset = off
	r.Timestamp = m.Timestamp()
	if l.appendTs >= 0 {
		r.Timestamp = l.appendTs
	}
	r.Attributes = m.Attributes()
	r.Key, r.Value, r.Headers = key, value, nil
	r.Sequence = NoSequence
	return true, nil
}

func (l *legacyIter) outerOffset() int64 {
	if l.outer != nil {
		return l.outer.Offset()
	}
	return -1
}
