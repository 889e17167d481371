package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// procStatusKiB reads one "Key: N kB" line of /proc/PID/status (VmRSS,
// VmHWM), in KiB; the test is skipped where there is no /proc.
func procStatusKiB(t *testing.T, pid int, key string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read the broker's resident memory from: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %s: %v", pid, key, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s line", pid, key)
	return 0
}

// floodFrame is one request on the wire: a Produce v9 with acks=1 of
// one batch of size bytes to a topic the broker does not have, so the
// broker reads, parses and answers the whole request (every partition
// UNKNOWN_TOPIC_OR_PARTITION) and writes nothing to its disk.
func floodFrame(size int) []byte {
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(9)
	req.Acks, req.TimeoutMillis = 1, 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "no-such-topic"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = make([]byte, size)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// The size, then the v2 header (key, version, correlation id, client
	// id, empty tagged fields), then the body.
	frame := make([]byte, 4, size+128)
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.Key()))
	frame = binary.BigEndian.AppendUint16(frame, uint16(req.GetVersion()))
	frame = binary.BigEndian.AppendUint32(frame, 1)
	frame = binary.BigEndian.AppendUint16(frame, 5)
	frame = append(frame, "flood"...)
	frame = append(frame, 0)
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	return frame
}

// readAnswer reads one response frame from nc and checks its
// correlation id; the answer's body is not decoded.
func readAnswer(nc net.Conn) error {
	var size [4]byte
	if _, err := io.ReadFull(nc, size[:]); err != nil {
		return err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(nc, body); err != nil {
		return err
	}
	if len(body) < 4 || binary.BigEndian.Uint32(body) != 1 {
		return fmt.Errorf("an answer of %d bytes with the wrong correlation id", len(body))
	}
	return nil
}

// TestRSSBoundedUnderConnectionFlood runs the broker binary with a 32
// MiB --queued-max-request-bytes and has 2,000 connections each send a
// 1 MiB request at once, then go idle. The broker's peak resident
// memory (VmHWM) stays within its resident memory before the flood plus
// the bound (twice, for the garbage collector's headroom) and 64 KiB a
// connection (goroutine stacks, socket state): far below the 2 GiB the
// requests add up to, which a broker reading every request it is sent
// would hold. Every request is answered, and every idle connection is
// closed by the broker after --connections-max-idle.
func TestRSSBoundedUnderConnectionFlood(t *testing.T) {
	const (
		conns       = 2000
		requestSize = 1 << 20
		bound       = 32 << 20
	)
	bin, dir := buildBroker(t), t.TempDir()
	p := startBrokerProc(t, bin, dir, "--queued-max-request-bytes", strconv.Itoa(bound), "--connections-max-idle", "10s")
	pid := p.cmd.Process.Pid
	before := procStatusKiB(t, pid, "VmRSS")
	frame := floodFrame(requestSize)

	var wg sync.WaitGroup
	errs := make(chan error, conns)
	ncs := make([]net.Conn, conns)
	for i := range conns {
		nc, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		ncs[i] = nc
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.SetDeadline(time.Now().Add(5 * time.Minute)) // a bound on a hung broker
			if _, err := nc.Write(frame); err != nil {
				errs <- fmt.Errorf("connection %d: write: %w", i, err)
				return
			}
			if err := readAnswer(nc); err != nil {
				errs <- fmt.Errorf("connection %d: answer: %w", i, err)
			}
		}()
	}
	t.Cleanup(func() {
		for _, nc := range ncs {
			nc.Close()
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	peak := procStatusKiB(t, pid, "VmHWM")
	limit := before + (2*bound+conns*64<<10)>>10
	t.Logf("broker resident memory: %d KiB before, peak %d KiB under %d connections of %d KiB requests (%d MiB sent); limit %d KiB",
		before, peak, conns, requestSize>>10, conns*requestSize>>20, limit)
	if peak > limit {
		t.Fatalf("the broker's peak resident memory was %d KiB (%d KiB before the flood): past %d KiB, the request bound of %d MiB twice and 64 KiB a connection",
			peak, before, limit, bound>>20)
	}

	// Now idle: each connection is closed by the broker.
	for i, nc := range ncs {
		var one [1]byte
		nc.SetReadDeadline(time.Now().Add(2 * time.Minute))
		if _, err := nc.Read(one[:]); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection %d: %v, want closed by the broker (EOF)", i, err)
		}
	}
}
