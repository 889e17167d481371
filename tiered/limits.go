package tiered

import (
	"context"
	"io"

	"github.com/tierlog/tierlog/internal/ratelimit"
)

// limitedBody paces an upload body through a rate limiter.
type limitedBody struct {
	ctx context.Context
	rs  io.ReadSeeker
	lim *ratelimit.Limiter
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if n := min(64<<10, b.lim.Burst()); len(p) > n {
		p = p[:n]
	}
	if err := b.lim.Wait(b.ctx, len(p)); err != nil {
		return 0, err
	}
	return b.rs.Read(p)
}

func (b *limitedBody) Seek(off int64, whence int) (int64, error) { return b.rs.Seek(off, whence) }

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
