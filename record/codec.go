package record

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Codec is a batch compression codec, as stored in attribute bits 0-2.
type Codec int8

// Codecs (frozen: Kafka's CompressionType ids).
const (
	None   Codec = 0
	GZIP   Codec = 1
	Snappy Codec = 2
	LZ4    Codec = 3
	ZSTD   Codec = 4
)

// String returns the codec's name as kafka-dump-log prints it.
func (c Codec) String() string {
	switch c {
	case None:
		return "none"
	case GZIP:
		return "gzip"
	case Snappy:
		return "snappy"
	case LZ4:
		return "lz4"
	case ZSTD:
		return "zstd"
	}
	return fmt.Sprintf("unknown(%d)", int8(c))
}

// ParseCodec maps a codec name (none, gzip, snappy, lz4, zstd) to a Codec.
func ParseCodec(name string) (Codec, error) {
	for c := None; c <= ZSTD; c++ {
		if c.String() == name {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: codec %q (want none, gzip, snappy, lz4 or zstd)", ErrUnknownCodec, name)
}

// DefaultMaxDecompressed caps the decompressed size of one batch unless a
// Decompressor is given another cap. Kafka's own limits (max.message.bytes,
// about 1 MiB by default) apply to compressed bytes; 64 MiB leaves room for
// highly compressible batches while bounding memory.
const DefaultMaxDecompressed = 64 << 20

// xerial snappy framing, as snappy-java's SnappyOutputStream writes it.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

const (
	xerialHeaderSize = 16 // magic + int32 version + int32 compatible version
	xerialBlockSize  = 32 << 10
)

// Decompressor decompresses batch payloads with reusable state and a cap on
// the output size. The zero value is ready to use with DefaultMaxDecompressed.
// It is not safe for concurrent use.
type Decompressor struct {
	// Max caps the decompressed bytes of one payload; 0 means
	// DefaultMaxDecompressed.
	Max int

	buf  []byte
	gz   *gzip.Reader
	lz   *lz4.Reader
	zstd *zstd.Decoder
	src  bytes.Reader

	zstdLimit int // the cap d.zstd was made with
}

func (d *Decompressor) max() int {
	if d.Max > 0 {
		return d.Max
	}
	return DefaultMaxDecompressed
}

// Decompress returns the decompressed form of src. The result is valid until
// the next call. Errors wrap ErrBadRecord (a stream that does not decode),
// ErrTooLarge or ErrUnknownCodec.
func (d *Decompressor) Decompress(c Codec, src []byte) ([]byte, error) {
	limit := d.max()
	d.buf = d.buf[:0]
	var err error
	switch c {
	case None:
		return src, nil
	case GZIP:
		d.src.Reset(src)
		if d.gz == nil {
			d.gz, err = gzip.NewReader(&d.src)
		} else {
			err = d.gz.Reset(&d.src)
		}
		if err == nil {
			err = d.readAll(d.gz, limit)
		}
	case Snappy:
		err = d.snappy(src, limit)
	case LZ4:
		d.src.Reset(src)
		if d.lz == nil {
			d.lz = lz4.NewReader(&d.src)
		} else {
			d.lz.Reset(&d.src)
		}
		err = d.readAll(d.lz, limit)
	case ZSTD:
		if d.zstd == nil || d.zstdLimit != limit {
			if d.zstd != nil {
				d.zstd.Close()
			}
			d.zstdLimit = limit
			d.zstd, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)+1))
			if err != nil {
				return nil, fmt.Errorf("record: zstd decoder: %w", err)
			}
		}
		d.buf, err = d.zstd.DecodeAll(src, d.buf)
		if err == nil && len(d.buf) > limit {
			err = ErrTooLarge
		}
		if err == zstd.ErrDecoderSizeExceeded || err == zstd.ErrWindowSizeExceeded {
			err = ErrTooLarge
		}
	default:
		return nil, batchErr(ErrUnknownCodec, -1, "codec id %d", int(c))
	}
	if err == ErrTooLarge {
		return nil, batchErr(ErrTooLarge, -1, "%s payload decompresses past %d bytes", c, limit)
	}
	if err != nil {
		return nil, batchErr(ErrBadRecord, -1, "%s payload does not decompress: %v", c, err)
	}
	return d.buf, nil
}

// readAll reads r to EOF into d.buf, failing with ErrTooLarge past limit.
func (d *Decompressor) readAll(r io.Reader, limit int) error {
	for {
		if len(d.buf) == cap(d.buf) {
			n := cap(d.buf) * 2
			if n < 4096 {
				n = 4096
			}
			if n > limit+1 {
				n = limit + 1
			}
			if n <= len(d.buf) {
				return ErrTooLarge
			}
			nb := make([]byte, len(d.buf), n)
			copy(nb, d.buf)
			d.buf = nb
		}
		n, err := r.Read(d.buf[len(d.buf):cap(d.buf)])
		d.buf = d.buf[:len(d.buf)+n]
		if len(d.buf) > limit {
			return ErrTooLarge
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// snappy decodes Kafka's xerial-framed snappy, or a raw snappy block (which
// snappy-java also reads, and which some clients write).
func (d *Decompressor) snappy(src []byte, limit int) error {
	if !bytes.HasPrefix(src, xerialMagic) {
		return d.snappyBlock(src, limit)
	}
	if len(src) < xerialHeaderSize {
		return fmt.Errorf("xerial header of %d bytes", len(src))
	}
	p := src[xerialHeaderSize:]
	for len(p) > 0 {
		if len(p) < 4 {
			return fmt.Errorf("xerial block length cut short")
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4:]
		if uint64(n) > uint64(len(p)) {
			return fmt.Errorf("xerial block of %d bytes runs past the %d left", n, len(p))
		}
		if err := d.snappyBlock(p[:n], limit); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (d *Decompressor) snappyBlock(block []byte, limit int) error {
	n, err := snappy.DecodedLen(block)
	if err != nil {
		return err
	}
	if n < 0 || n > limit-len(d.buf) {
		return ErrTooLarge
	}
	start := len(d.buf)
	d.buf = grow(d.buf, n)
	out, err := snappy.Decode(d.buf[start:start+n], block)
	if err != nil {
		return err
	}
	if len(out) != n {
		return fmt.Errorf("snappy block decoded to %d bytes, header said %d", len(out), n)
	}
	return nil
}

// grow extends b by n bytes, reallocating when needed.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// compressor holds reusable compression state for a Builder.
type compressor struct {
	gz   *gzip.Writer
	lz   *lz4.Writer
	zstd *zstd.Encoder
	out  bytes.Buffer
}

// compress appends the compressed form of src, in the stream format Kafka's
// Java producer writes for codec c, to dst.
func (z *compressor) compress(dst []byte, c Codec, src []byte) ([]byte, error) {
	switch c {
	case None:
		return append(dst, src...), nil
	case GZIP:
		z.out.Reset()
		if z.gz == nil {
			z.gz = gzip.NewWriter(&z.out)
		} else {
			z.gz.Reset(&z.out)
		}
		if _, err := z.gz.Write(src); err != nil {
			return dst, err
		}
		if err := z.gz.Close(); err != nil {
			return dst, err
		}
		return append(dst, z.out.Bytes()...), nil
	case Snappy:
		dst = append(dst, xerialMagic...)
		dst = binary.BigEndian.AppendUint32(dst, 1) // version
		dst = binary.BigEndian.AppendUint32(dst, 1) // minimum compatible version
		for len(src) > 0 {
			chunk := src
			if len(chunk) > xerialBlockSize {
				chunk = chunk[:xerialBlockSize]
			}
			src = src[len(chunk):]
			lenAt := len(dst)
			dst = append(dst, 0, 0, 0, 0)
			need := snappy.MaxEncodedLen(len(chunk))
			start := len(dst)
			dst = grow(dst, need)
			enc := snappy.Encode(dst[start:start+need], chunk)
			dst = dst[:start+len(enc)]
			binary.BigEndian.PutUint32(dst[lenAt:], uint32(len(enc)))
		}
		return dst, nil
	case LZ4:
		z.out.Reset()
		if z.lz == nil {
			z.lz = lz4.NewWriter(&z.out)
		} else {
			z.lz.Reset(&z.out)
		}
		// Kafka's Lz4BlockOutputStream: 64 KiB independent blocks, no block
		// or content checksums, no content size.
		if err := z.lz.Apply(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(false),
			lz4.BlockChecksumOption(false), lz4.ConcurrencyOption(1)); err != nil {
			return dst, err
		}
		if _, err := z.lz.Write(src); err != nil {
			return dst, err
		}
		if err := z.lz.Close(); err != nil {
			return dst, err
		}
		return append(dst, z.out.Bytes()...), nil
	case ZSTD:
		if z.zstd == nil {
			var err error
			z.zstd, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
			if err != nil {
				return dst, err
			}
		}
		return z.zstd.EncodeAll(src, dst), nil
	}
	return dst, batchErr(ErrUnknownCodec, -1, "codec id %d", int(c))
}
