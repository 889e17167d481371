package tiered

import (
	"context"
	"io"

	"github.com/tierlog/tierlog/internal/ratelimit"
)

// limitedBody paces an upload body through a rate limiter. Only bytes past
// the furthest position read so far are paid for: a driver that reads the
// body once to hash it and again to send it (the S3 SDK signing a
// payload, computing its checksum), or seeks back to retry, pays once per
// byte uploaded, so the rate the limiter holds is the upload's.
type limitedBody struct {
	ctx      context.Context
	rs       io.ReadSeeker
	lim      *ratelimit.Limiter
	pos, max int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if n := min(64<<10, b.lim.Burst()); len(p) > n {
		p = p[:n]
	}
	n, err := b.rs.Read(p)
	if fresh := b.pos + int64(n) - b.max; fresh > 0 {
		// Paid for before the bytes are handed on, so the sender is paced.
		if werr := b.lim.Wait(b.ctx, int(fresh)); werr != nil {
			return 0, werr
		}
		b.max = b.pos + int64(n)
	}
	b.pos += int64(n)
	return n, err
}

func (b *limitedBody) Seek(off int64, whence int) (int64, error) {
	pos, err := b.rs.Seek(off, whence)
	if err == nil {
		b.pos = pos
	}
	return pos, err
}

// progressBody reports the bytes read from rs past the furthest position
// read so far, so a retry that seeks back and reads again reports nothing
// twice.
type progressBody struct {
	rs       io.ReadSeeker
	pos, max int64
	report   func(int64)
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.rs.Read(p)
	b.pos += int64(n)
	if b.pos > b.max {
		b.report(b.pos - b.max)
		b.max = b.pos
	}
	return n, err
}

func (b *progressBody) Seek(off int64, whence int) (int64, error) {
	pos, err := b.rs.Seek(off, whence)
	if err == nil {
		b.pos = pos
	}
	return pos, err
}
