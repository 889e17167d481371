package clients_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/examples/broker/broker"
)

// TestKcatCodecs: kcat (librdkafka) produces with every codec, unpinned;
// the stored batches carry the codec (librdkafka 2.0's #4956 sent gzip,
// snappy and lz4 uncompressed to a broker whose ApiVersions says
// Produce from v3), and kcat reads the records back byte-identical.
// Skipped when kcat is not installed (Debian package kcat).
func TestKcatCodecs(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (Debian package kcat): librdkafka not tested")
	}
	t.Run("local", func(t *testing.T) { testKcatCodecs(t, kcat, startBroker(t)) })
	t.Run("diskless", func(t *testing.T) { testKcatCodecs(t, kcat, startDisklessBroker(t)) })
}

func testKcatCodecs(t *testing.T, kcat string, b *broker.Broker) {
	for _, tc := range codecs {
		t.Run(tc.name, func(t *testing.T) {
			topic := "kcat-" + tc.name
			var lines []string
			for i := range 200 {
				lines = append(lines, string(payload(tc.name, i)))
			}
			input := strings.Join(lines, "\n") + "\n"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := []string{"-b", b.Addr(), "-P", "-t", topic, "-p", "0", "-X", "topic.metadata.refresh.interval.ms=1000"}
			if tc.name != "none" {
				args = append(args, "-z", tc.name)
			}
			prod := exec.CommandContext(ctx, kcat, args...)
			prod.Stdin = strings.NewReader(input)
			if out, err := prod.CombinedOutput(); err != nil {
				t.Fatalf("kcat produce: %v\n%s", err, out)
			} else if bytes.Contains(out, []byte("not compressing")) {
				t.Fatalf("kcat produce: librdkafka did not compress:\n%s", out)
			}
			checkCodec(t, b, topic, tc.codec)
			cons := exec.CommandContext(ctx, kcat, "-b", b.Addr(), "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", "200", "-e", "-q", "-f", "%s\n")
			out, err := cons.Output()
			if err != nil {
				t.Fatalf("kcat consume: %v", err)
			}
			if string(out) != input {
				t.Fatalf("kcat read back %d bytes, want the %d produced", len(out), len(input))
			}
		})
	}
}
