package broker

import (
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kbin"
)

// writeFetch writes a Fetch response (versions 4 to 12) whose record
// batches go from each partition's Records straight to the socket.
//
// kmsg encodes a response into one buffer, records included; here the
// framing is encoded around the records instead. Each partition's
// RecordBatches field is a length then the bytes, and Records.Len gives
// the length before a byte is read, so the whole response's size is known
// up front: the framing is built into one buffer with a gap at each
// partition's records, then written piece by piece, the buffer up to a
// gap, that partition's Records (Records.WriteTo on the connection:
// sendfile for local segments), and so on.
//
//	Fetch response v4..v12 (v12 is flexible: compact lengths, tag sections)
//	  size int32 | correlation id int32 | [v12: header tags]
//	  throttle_ms int32 | [v7+: error_code int16, session_id int32]
//	  topics: [ name string
//	    partitions: [ partition int32, error_code int16,
//	      high_watermark int64, last_stable_offset int64,
//	      [v5+: log_start_offset int64],
//	      aborted_transactions: nullable [producer_id int64, first_offset int64 (tags)],
//	      [v11+: preferred_read_replica int32],
//	      records: nullable bytes (tags) ] (tags) ] (tags)
func (c *conn) writeFetch(req *request, res *fetchResult) error {
	c.armWrite()
	v := req.version
	flex := v >= 12
	buf := append(c.out[:0], 0, 0, 0, 0)
	buf = kbin.AppendInt32(buf, req.corr)
	if flex {
		buf = append(buf, 0)
	}
	buf = kbin.AppendInt32(buf, 0) // throttle
	if v >= 7 {
		buf = kbin.AppendInt16(buf, 0)
		buf = kbin.AppendInt32(buf, 0) // no fetch session
	}
	buf = appendArrayLen(buf, len(res.topics), flex)
	type gap struct {
		at int // offset in buf where the records go
		i  int // topic
		j  int // partition
	}
	var gaps []gap
	total := int64(0)
	for i := range res.topics {
		t := &res.topics[i]
		if flex {
			buf = kbin.AppendCompactString(buf, t.name)
		} else {
			buf = kbin.AppendString(buf, t.name)
		}
		buf = appendArrayLen(buf, len(t.parts), flex)
		for j := range t.parts {
			p := &t.parts[j]
			buf = kbin.AppendInt32(buf, p.partition)
			buf = kbin.AppendInt16(buf, p.errCode)
			buf = kbin.AppendInt64(buf, p.offsets.HighWatermark)
			buf = kbin.AppendInt64(buf, p.offsets.LastStableOffset)
			if v >= 5 {
				buf = kbin.AppendInt64(buf, p.offsets.LogStart)
			}
			if flex {
				buf = kbin.AppendCompactNullableArrayLen(buf, len(p.aborted), p.aborted == nil)
			} else {
				buf = kbin.AppendNullableArrayLen(buf, len(p.aborted), p.aborted == nil)
			}
			for _, a := range p.aborted {
				buf = kbin.AppendInt64(buf, a.ProducerID)
				buf = kbin.AppendInt64(buf, a.FirstOffset)
				if flex {
					buf = append(buf, 0)
				}
			}
			if v >= 11 {
				buf = kbin.AppendInt32(buf, -1) // no preferred read replica
			}
			n := int64(0)
			if p.recs != nil {
				n = p.recs.Len()
			}
			if flex {
				buf = kbin.AppendUvarint(buf, uint32(n)+1)
			} else {
				buf = kbin.AppendInt32(buf, int32(n))
			}
			if n > 0 {
				gaps = append(gaps, gap{at: len(buf), i: i, j: j})
				total += n
			}
			if flex {
				buf = append(buf, 0) // partition tags
			}
		}
		if flex {
			buf = append(buf, 0) // topic tags
		}
	}
	if flex {
		buf = append(buf, 0) // response tags
	}
	binary.BigEndian.PutUint32(buf, uint32(int64(len(buf))-4+total))
	c.out = buf
	from := 0
	for _, g := range gaps {
		if _, err := c.nc.Write(buf[from:g.at]); err != nil {
			return err
		}
		recs := res.topics[g.i].parts[g.j].recs
		n, err := recs.WriteTo(c.nc)
		if err != nil {
			return err
		}
		if n != recs.Len() {
			// The frame's size is on the wire already: the stream is
			// unusable; the caller closes the connection.
			return fmt.Errorf("broker: records wrote %d of %d bytes", n, recs.Len())
		}
		from = g.at
	}
	_, err := c.nc.Write(buf[from:])
	return err
}

func appendArrayLen(dst []byte, n int, flex bool) []byte {
	if flex {
		return kbin.AppendCompactArrayLen(dst, n)
	}
	return kbin.AppendArrayLen(dst, n)
}
