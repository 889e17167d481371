package broker_test

import (
	"encoding/binary"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestMutatedRequestsDoNotCrash: every api key at every version
// ApiVersions says, as kmsg encodes its default request, with a few
// bytes overwritten and sometimes bytes appended, each on a connection of
// its own: the broker answers or closes the connection, never panics, and
// serves a client afterwards. TIERLOG_SEED replays a run (its seed is
// logged).
func TestMutatedRequestsDoNotCrash(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("TIERLOG_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (TIERLOG_SEED replays it)", seed)
	rng := rand.New(rand.NewSource(seed))
	opts := testOptions(t.TempDir())
	opts.Logger = slog.New(slog.DiscardHandler) // a warning a refused request
	b := startBroker(t, opts)
	createTopic(t, newClient(t, b.Addr()), "m", 2, nil)
	av := dialRaw(t, b.Addr()).apiVersions(3)
	for _, k := range av.ApiKeys {
		for v := k.MinVersion; v <= k.MaxVersion; v++ {
			for range 8 {
				sendMutated(t, b.Addr(), rng, k.ApiKey, v)
			}
		}
	}
	if r := dialRaw(t, b.Addr()).apiVersions(3); r.ErrorCode != 0 {
		t.Fatalf("ApiVersions after the mutated requests: error code %d", r.ErrorCode)
	}
}

// sendMutated sends one mutated request of key and version and reads
// what comes back for a moment (an answer, a close, or nothing yet: a
// request that parks).
func sendMutated(t *testing.T, addr string, rng *rand.Rand, key, version int16) {
	t.Helper()
	req := kmsg.RequestForKey(key)
	req.SetVersion(version)
	body := req.AppendTo(nil)
	for m := rng.Intn(8); m >= 0 && len(body) > 0; m-- {
		body[rng.Intn(len(body))] = byte(rng.Intn(256))
	}
	if rng.Intn(5) == 0 {
		extra := make([]byte, 1+rng.Intn(40))
		rng.Read(extra)
		body = append(body, extra...)
	}
	buf := []byte{0, 0, 0, 0}
	buf = kbin.AppendInt16(buf, key)
	buf = kbin.AppendInt16(buf, version)
	buf = kbin.AppendInt32(buf, 1)
	buf = kbin.AppendNullableString(buf, kmsg.StringPtr("mutate"))
	if req.IsFlexible() {
		buf = append(buf, 0)
	}
	buf = append(buf, body...)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial after api key %d v%d: %v", key, version, err)
	}
	defer nc.Close()
	nc.Write(buf)
	nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var head [4]byte
	nc.Read(head[:])
}
