// Command broker is a small, single-node broker that speaks Kafka's wire
// protocol on tierlog (package broker beside it does the work):
//
//	go run ./examples/broker --listen 127.0.0.1:9092 --dir DIR [--store URL] [--config key=value]… [--broker-config key=value]…
//	    [--max-partitions N] [--max-partitions-per-request N] [--queued-max-request-bytes N] [--connections-max-idle D]
//
// Topics are created on first use with the default config (--config,
// repeatable, Kafka's topic config names) or by CreateTopics with their
// own. With --store (file:///dir, s3://bucket/prefix?…,
// minio://bucket/prefix?endpoint=…) topics with remote.storage.enable=true
// keep their closed segments in that bucket; --broker-config sets Kafka's
// remote.log.manager.* and remote.log.reader.* broker properties.
// The broker's defences: at most --max-partitions partitions
// (20,000), --max-partitions-per-request in one CreateTopics (10,000),
// --queued-max-request-bytes of requests in flight across connections
// (Kafka's queued.max.request.bytes; 256 MiB), and a connection idle for
// --connections-max-idle is closed (connections.max.idle.ms; 10m).
// SIGTERM or SIGINT shuts down cleanly; after a SIGKILL the next start
// recovers the log directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tierlog/tierlog/examples/broker/broker"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"

	// The drivers of the s3:// and minio:// --store URLs.
	_ "github.com/tierlog/tierlog/objstore/minio"
	_ "github.com/tierlog/tierlog/objstore/s3"
)

// configFlags collects repeated --config key=value flags.
type configFlags map[string]string

func (c configFlags) String() string { return fmt.Sprint(map[string]string(c)) }

func (c configFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	c[k] = v
	return nil
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	opts := broker.Options{TopicConfig: configFlags{}, RemoteLogManager: configFlags{}}
	fs.StringVar(&opts.Listen, "listen", "127.0.0.1:9092", "TCP address to serve Kafka's protocol on")
	fs.StringVar(&opts.Advertise, "advertise", "", "host:port clients are told to connect to (default: the listen address)")
	fs.StringVar(&opts.Dir, "dir", "", "data directory: the log directory and the broker's own files (required)")
	store := fs.String("store", "", "bucket `URL` of topics with remote.storage.enable=true (file:///dir, s3://bucket/prefix?…, minio://bucket/prefix?endpoint=…)")
	replicaOf := fs.String("read-replica-of", "", "serve, read-only, the topics another cluster keeps in the bucket at `URL` (its --store): a read replica; not with --store")
	partitions := fs.Int("partitions", 1, "partitions of auto-created topics (num.partitions)")
	noAuto := fs.Bool("no-auto-create", false, "turn auto.create.topics.enable off")
	fs.IntVar(&opts.MaxPartitions, "max-partitions", 20000, "partitions the broker holds at most, every topic's together")
	fs.Int64Var(&opts.QueuedMaxRequestBytes, "queued-max-request-bytes", 256<<20, "bytes of requests read and not yet answered, across connections (queued.max.request.bytes; -1: no bound)")
	fs.DurationVar(&opts.ConnectionsMaxIdle, "connections-max-idle", 10*time.Minute, "close a connection idle this long (connections.max.idle.ms; -1ns: never)")
	fs.IntVar(&opts.MaxPartitionsPerRequest, "max-partitions-per-request", 10000, "partitions one CreateTopics may ask for, its topics together")
	verbose := fs.Bool("v", false, "log at debug level")
	fs.Var(configFlags(opts.TopicConfig), "config", "default topic config `key=value` (repeatable)")
	fs.Var(configFlags(opts.RemoteLogManager), "broker-config", "broker property `key=value`: remote.log.manager.* and remote.log.reader.* (repeatable; needs --store)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if opts.Dir == "" {
		return errors.New("--dir is required")
	}
	if len(opts.RemoteLogManager) > 0 && *store == "" && *replicaOf == "" {
		return errors.New("--broker-config: the remote log manager's properties need --store or --read-replica-of")
	}
	if *store != "" && *replicaOf != "" {
		return errors.New("--store and --read-replica-of: a read replica serves another cluster's bucket and tiers nothing of its own")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts.Partitions, opts.NoAutoCreate = int32(*partitions), *noAuto
	if *store != "" {
		s, err := openStore("--store", *store)
		if err != nil {
			return err
		}
		defer s.Close()
		opts.Store = s
	}
	if *replicaOf != "" {
		s, err := openStore("--read-replica-of", *replicaOf)
		if err != nil {
			return err
		}
		defer s.Close()
		opts.ReadReplicaOf = s
	}
	// The signals are ours before the address is out: one sent the
	// moment a client (or a supervisor) reads it, or during Start, is
	// kept for the clean shutdown below, not the runtime's default exit.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	b, err := broker.Start(opts)
	if err != nil {
		return err
	}
	fmt.Printf("listening on %s\n", b.Addr())
	<-sig
	return b.Close()
}

// openStore opens the bucket of --store. A mem:// bucket is refused: it
// would vanish with the process, with the segments local retention
// deleted from disk once it held them.
func openStore(flag, raw string) (*objstore.Store, error) {
	if u, err := url.Parse(raw); err == nil && strings.EqualFold(u.Scheme, "mem") {
		return nil, fmt.Errorf("%s %s: a mem:// bucket lives only inside this process and would take the tiered segments with it; use file://, s3:// or minio://", flag, raw)
	}
	s, err := storeurl.Open(context.Background(), raw, objstore.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return s, nil
}
