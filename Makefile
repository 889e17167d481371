# tierlog's build. Everything a target needs it installs into .cache/ itself.
GO        ?= go
CACHE     := $(CURDIR)/.cache
BIN       := $(CACHE)/bin
FUZZTIME  ?= 10s
BENCHTIME ?= 1s
STATICCHECK_VERSION := v0.8.2
# The S3 servers the integration tests start when no Docker engine answers;
# the object-store suites run against both.
VERSITYGW_VERSION := v1.8.0
# MinIO's server has no tagged Go module versions: this pseudo-version is
# the commit the tests are run against. A test tool only: built here from
# the Go module proxy, never linked into tierlog. Plain `go install
# pkg@version` works for it (its go.mod has no replace directives); about
# 2 minutes cold on 2 cores, a 150 MB binary.
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
S3SERVERS := $(BIN)/versitygw $(BIN)/minio

.PHONY: all test test-scale race soak lint bench bench-broker bench-diskless bench-manifest bench-scale bench-compact bench-compare bench-update fuzz demo tierctl versitygw minio s3servers clean

all: lint test

## test: every test, including the S3 integration tests against a real S3
## server, the Kafka fixture tests (skipped, with a message, when ../shared
## is absent), the soak's short form (40 s, testing/soak), bench/'s
## smoke test (every bench-compare row on a small log, about 25 s) and
## the reference broker driven by sarama, kafka-go and kcat (skipped,
## naming the Debian package, when absent; examples/broker/clients, a
## module of its own; about 15 s)
test: $(S3SERVERS)
	$(GO) test -timeout 20m ./...
	cd bench && TIERLOG_VERSITYGW=$(BIN)/versitygw $(GO) test -timeout 10m ./...
	cd examples/broker/clients && $(GO) test -timeout 10m ./...

## race: the tests under the race detector
race: $(S3SERVERS)
	$(GO) test -race -timeout 30m ./...

## soak: the soak (produce, offload, retention, compaction, SIGKILL, restore
## against a 4-node MinIO through a fault proxy, its nodes SIGKILLed at
## random times) for SOAK_DURATION (default 10m);
## SOAK_TIMEOUT bounds the whole run; TIERLOG_SOAK_SEED=<seed> replays a run
SOAK_DURATION ?= 10m
SOAK_TIMEOUT  ?= 30m
soak: $(BIN)/minio
	$(GO) test -run '^TestSoak$$' -count=1 -v -timeout $(SOAK_TIMEOUT) ./testing/soak -soak.duration $(SOAK_DURATION) -soak.kill-nodes

## s3servers: install both S3 servers the tests use into .cache/bin
s3servers: $(S3SERVERS)

## versitygw: install versitygw (an S3 server the tests use) into .cache/bin
versitygw: $(BIN)/versitygw

$(BIN)/versitygw:
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

## minio: install the MinIO server (an S3 server the tests use) into .cache/bin
minio: $(BIN)/minio

$(BIN)/minio:
	GOBIN=$(BIN) $(GO) install github.com/minio/minio@$(MINIO_VERSION)

## lint: gofmt, go vet and staticcheck
lint: $(BIN)/staticcheck
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.cache/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...
	cd bench && $(GO) vet ./... && $(BIN)/staticcheck ./...
	cd examples/broker/clients && $(GO) vet ./... && $(BIN)/staticcheck ./...

$(BIN)/staticcheck:
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

## bench: every Go benchmark (set BENCHTIME=3s for steadier figures)
bench: $(S3SERVERS)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./...

## bench-broker: kgo producing and consuming 1 GiB (BROKER_BENCH_RECORDS
## records of 1 KiB) through the reference broker beside kfake: a local
## topic, a tiered one on versitygw consumed from the bucket after local
## retention (bucket/local is its consume rate over the local one) and a
## diskless one; then sarama, a local topic beside kfake
## (examples/broker/clients, a module of its own)
BROKER_BENCH_RECORDS ?= 1048576
bench-broker: $(BIN)/versitygw
	TIERLOG_VERSITYGW=$(BIN)/versitygw $(GO) test ./examples/broker/broker -run '^$$' -bench Kgo -benchtime $(BROKER_BENCH_RECORDS)x -timeout 30m
	cd examples/broker/clients && $(GO) test . -run '^$$' -bench Sarama -benchtime $(BROKER_BENCH_RECORDS)x -timeout 30m

## bench-diskless: the diskless goals' Go benchmarks (tiered): the WAL PUT
## rate of 1,000 diskless partitions at 1 MB/s beside its bound, the
## acknowledgement latency beside the raw PUT's, produce throughput with
## 1, 2 and 4 objects in flight beside raw PUTs (all against MinIO behind
## 20 ms of added PUT latency), and a cold tail's consume beside raw
## ranged GETs (about a minute)
bench-diskless: $(BIN)/minio
	$(GO) test ./tiered -run '^$$' -bench 'Diskless' -benchtime 1x -timeout 20m

## bench-manifest: the manifest bytes a partition puts over its life
## (500, 1,000 and 2,000 segments, one commit each; other sizes with
## TIERLOG_BENCH_MANIFEST_SEGMENTS=1000,10000,100000, 100,000 taking about
## 3 minutes), what its last and largest commit put, and what a new reader
## gets to read it; the layered manifest's goal is 2 MB at 2,000 segments
bench-manifest:
	$(GO) test ./tiered -run '^$$' -bench ManifestBytesPut -benchtime 1x -timeout 20m

## test-scale: the layered manifest at 10 million synthetic segments (a
## commit puts at most 64 KiB of head plus the new part; about 2 GB of
## heap and 6 minutes; make test runs it at 200,000)
test-scale:
	TIERLOG_MANIFEST_SEGMENTS=10000000 $(GO) test ./manifest -run '^TestLayeredTenMillion$$' -count=1 -v -timeout 30m

## bench-scale: a Backend with 10,000 partitions of 1,000 remote segments
## each: its heap once attached, a follower step and a claim at a new
## epoch of every partition (requests, bytes, time), a retention pass
## (BenchmarkAttachedPartitions; TIERLOG_BENCH_PARTITIONS and
## TIERLOG_BENCH_SEGMENTS change the sizes)
bench-scale:
	TIERLOG_BENCH_PARTITIONS=10000 $(GO) test ./tiered -run '^$$' -bench AttachedPartitions -benchtime 1x -timeout 30m

## bench-compact: the bucket's cleaner on a compacted tiered topic of
## 100,000 keys given 5 million updates on MinIO (BenchmarkCompactRemote):
## the bucket's bytes over one value per key, requests per rewritten GiB,
## its throughput beside the local cleaner's (TIERLOG_COMPACT_KEYS and
## TIERLOG_COMPACT_UPDATES change the sizes; 1,000,000 and 50,000,000 take
## about 7 minutes and 15 GB of disk)
bench-compact: $(BIN)/minio
	TIERLOG_COMPACT_KEYS=100000 TIERLOG_COMPACT_UPDATES=5000000 $(GO) test ./tiered -run '^$$' -bench CompactRemote -benchtime 1x -timeout 60m

## bench-compare: tierlog side by side with Go peers and the machine's limits
## (bench/, a module of its own; under 20 minutes on 2 cores), then the
## groups of Go benchmarks above as rows with their goals (diskless,
## manifest, attached, compact, clients; about 5 of the minutes); prints
## Markdown tables. BENCH_FLAGS='-only remote' runs one group (go run .
## -help lists them; compact-full, the compaction goal's size, only so).
bench-compare: $(S3SERVERS)
	cd bench && TIERLOG_VERSITYGW=$(BIN)/versitygw TIERLOG_MINIO=$(BIN)/minio $(GO) run . $(BENCH_FLAGS)

## bench-update: bench-compare, also writing the tables into BENCHMARKS.md
bench-update: $(S3SERVERS)
	cd bench && TIERLOG_VERSITYGW=$(BIN)/versitygw TIERLOG_MINIO=$(BIN)/minio $(GO) run . -update ../BENCHMARKS.md $(BENCH_FLAGS)

## fuzz: a short run of every fuzz target (FUZZTIME per target, default 10s)
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME); \
	  done; \
	done

## demo: the end-to-end pipeline on a temporary directory, ending with a
## Kafka client through the reference broker, built into .cache/bin and run
## by tierctl as its own process (tierctl does not link examples/)
demo:
	$(GO) build -o $(BIN)/broker ./examples/broker
	$(GO) run ./cmd/tierctl demo --broker $(BIN)/broker

## tierctl: build the operator CLI into bin/
tierctl:
	$(GO) build -o bin/tierctl ./cmd/tierctl

clean:
	rm -rf bin
