package main

import (
	"bufio"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/tiered"
	"github.com/tierlog/tierlog/wal"
)

// prices are object store list prices in USD; the defaults are Amazon S3
// Standard's in us-east-1.
type prices struct {
	StorageGBMonth float64 `json:"storagePerGBMonth"`
	PutPer1000     float64 `json:"putPer1000"` // PUT, COPY, POST, LIST
	GetPer1000     float64 `json:"getPer1000"` // GET, HEAD
	TransferGB     float64 `json:"transferPerGB"`
}

// validate refuses a price that is negative, not a number or infinite,
// naming its flag.
func (p prices) validate() error {
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--price-storage", p.StorageGBMonth}, {"--price-put", p.PutPer1000}, {"--price-get", p.GetPer1000}, {"--price-transfer", p.TransferGB}} {
		if !(f.v >= 0) || math.IsInf(f.v, 1) {
			return usagef("%s %v: want a price in USD >= 0", f.flag, f.v)
		}
	}
	return nil
}

// gb is the unit S3 bills storage and transfer in (2^30 bytes).
const gb = 1 << 30

// partitionCost is the estimate for one partition's bucket data.
type partitionCost struct {
	Partition string `json:"partition"`
	Segments  int    `json:"segments"`
	Objects   int    `json:"objects"`
	Bytes     int64  `json:"bytes"`
	Records   int64  `json:"records"`
	// Requests by activity: uploading what is there (PUTs, manifest
	// commits included), reading all of it once from the bucket, restoring
	// it, and one gc pass (LISTs).
	UploadPuts   int64   `json:"uploadPuts"`
	ReadAllGets  int64   `json:"readAllGets"`
	RestoreGets  int64   `json:"restoreGets"`
	GCLists      int64   `json:"gcLists"`
	StorageMonth float64 `json:"storagePerMonthUSD"`
	UploadUSD    float64 `json:"uploadUSD"`
	ReadAllUSD   float64 `json:"readAllUSD"`
	RestoreUSD   float64 `json:"restoreUSD"`
	GCUSD        float64 `json:"gcUSD"`
}

// estimate prices a manifest. A consumer reading everything once from the
// bucket costs one GET per remote index and one ranged GET per fetchBytes
// of log; a restore costs one GET per object; a gc pass one LIST per
// 1,000 objects; the upload one PUT per object and two per manifest
// generation (the manifest and its backup). The objects are every one
// each segment records (manifest.Manifest.Objects: its .log, indexes, and
// whichever of the .txnindex, producer snapshot and leader-epoch
// checkpoint it has) and the manifest's parts, the manifest and the two
// backups a partition keeps (fewer below generation 2); a restore reads
// all but the backups.
func estimate(name string, m *manifest.Manifest, p prices, fetchBytes int64) partitionCost {
	objects, bytes := m.Objects()
	for _, part := range m.Parts {
		objects++
		bytes += part.Bytes
	}
	backups := int(min(m.Generation, 2))
	c := partitionCost{Partition: name, Segments: len(m.Segments), Objects: objects + 1 + backups, Bytes: bytes}
	var logBytes int64
	for _, s := range m.Segments {
		logBytes += s.Size
		c.Records += s.Records
		c.ReadAllGets += 1 + (s.Size+fetchBytes-1)/fetchBytes
	}
	c.UploadPuts = int64(objects) + 2*int64(m.Generation)
	c.RestoreGets = int64(objects + 1)
	c.GCLists = int64(c.Objects+999) / 1000
	get := func(n int64) float64 { return float64(n) / 1000 * p.GetPer1000 }
	put := func(n int64) float64 { return float64(n) / 1000 * p.PutPer1000 }
	transfer := func(n int64) float64 { return float64(n) / gb * p.TransferGB }
	c.StorageMonth = float64(c.Bytes) / gb * p.StorageGBMonth
	c.UploadUSD = put(c.UploadPuts)
	c.ReadAllUSD = get(c.ReadAllGets) + transfer(logBytes)
	c.RestoreUSD = get(c.RestoreGets) + transfer(c.Bytes)
	c.GCUSD = put(c.GCLists)
	return c
}

func newCostCmd() *cobra.Command {
	var storeURL string
	var partitions []string
	var asJSON bool
	var fetchBytes int64
	p := prices{StorageGBMonth: 0.023, PutPer1000: 0.005, GetPer1000: 0.0004}
	cmd := &cobra.Command{
		Use:   "cost --store URL [--partition TOPIC-PARTITION]...",
		Short: "Estimate what a partition's bucket data costs at object store list prices",
		Long: `cost reads the manifests of the given partitions (default: every partition
with a manifest in the bucket) and turns their object and byte counts into
an estimate at list prices: storage per month, the PUTs the upload took
(one per object a segment has, two manifest writes per generation: the
manifest and its backup), the GETs
of reading everything once from the bucket (one per remote index, one per
--fetch-bytes of log), of a restore (one per object), and of a gc pass
(one LIST per 1,000 objects). The WAL objects of diskless topics are
priced too: their storage, the PUTs they took, and a day of a Backend
producing without pause (a PUT each commit interval, 250 ms by default).
A partition given that has no manifest, and
a bucket with none at all, are errors (exit 2): a wrong URL must not
price as $0.

The default prices are Amazon S3 Standard's in us-east-1: $0.023 per
GB-month, $0.005 per 1,000 PUT/COPY/POST/LIST, $0.0004 per 1,000 GET, and
no transfer charge (reads from the same region). Set your own with the
--price-* flags; --price-transfer 0.09 prices reads from the internet.`,
		Example: `  tierctl cost --store file:///var/lib/tierlog/bucket
  tierctl cost --store 's3://my-bucket/tierlog?region=eu-west-1' --partition orders-0 --json
  tierctl cost --store s3://my-bucket --price-storage 0.0125   # S3 Standard-IA`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if fetchBytes < 1 {
				return usagef("--fetch-bytes %d: want at least 1 byte", fetchBytes)
			}
			if err := p.validate(); err != nil {
				return err
			}
			for _, tp := range partitions {
				if _, err := local.ParsePartitionDirName(tp); err != nil {
					return usagef("--partition: %v", err)
				}
			}
			store, err := openStore(ctx, storeURL)
			if err != nil {
				return err
			}
			defer store.Close()
			prefixes := partitions
			if len(prefixes) == 0 {
				if prefixes, err = bucketPartitions(ctx, store); err != nil {
					return err
				}
				if len(prefixes) == 0 {
					return errNoPartitions(storeURL)
				}
			}
			parts, _ := loadManifests(ctx, store, prefixes, false)
			total := partitionCost{Partition: "total"}
			var rows []partitionCost
			for _, rp := range parts {
				if rp.err != nil {
					return fmt.Errorf("%s: %w", rp.prefix, rp.err)
				}
				if !manifestExists(rp.m) {
					return errNoManifestAt(storeURL, rp.prefix)
				}
				c := estimate(rp.prefix, rp.m, p, fetchBytes)
				rows = append(rows, c)
				total.Segments += c.Segments
				total.Objects += c.Objects
				total.Bytes += c.Bytes
				total.Records += c.Records
				total.UploadPuts += c.UploadPuts
				total.ReadAllGets += c.ReadAllGets
				total.RestoreGets += c.RestoreGets
				total.GCLists += c.GCLists
				total.StorageMonth += c.StorageMonth
				total.UploadUSD += c.UploadUSD
				total.ReadAllUSD += c.ReadAllUSD
				total.RestoreUSD += c.RestoreUSD
				total.GCUSD += c.GCUSD
			}
			walObjs, err := tiered.ListWAL(ctx, store, "")
			if err != nil {
				return err
			}
			wc := estimateWAL(walObjs, p)
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			if asJSON {
				writeJSON(w, map[string]any{"store": storeurl.Redact(storeURL), "prices": p, "fetchBytes": fetchBytes,
					"partitions": rows, "total": total, "wal": wc})
				return nil
			}
			if len(rows) > 1 {
				rows = append(rows, total)
			}
			for _, c := range rows {
				fmt.Fprintf(w, "%s: %d segments, %d objects, %.1f MB, %d records\n", c.Partition, c.Segments, c.Objects, float64(c.Bytes)/1e6, c.Records)
				fmt.Fprintf(w, "  storage            %14s  %s per month\n", "", usd(c.StorageMonth))
				fmt.Fprintf(w, "  upload (done)      %8d PUTs  %s\n", c.UploadPuts, usd(c.UploadUSD))
				fmt.Fprintf(w, "  read all once      %8d GETs  %s\n", c.ReadAllGets, usd(c.ReadAllUSD))
				fmt.Fprintf(w, "  restore            %8d GETs  %s\n", c.RestoreGets, usd(c.RestoreUSD))
				fmt.Fprintf(w, "  gc pass            %8d LISTs %s\n", c.GCLists, usd(c.GCUSD))
			}
			if wc.Objects > 0 {
				fmt.Fprintf(w, "WAL objects of diskless topics: %d objects, %.1f MB\n", wc.Objects, float64(wc.Bytes)/1e6)
				fmt.Fprintf(w, "  storage            %14s  %s per month\n", "", usd(wc.StorageMonth))
				fmt.Fprintf(w, "  their uploads      %8d PUTs  %s\n", wc.Objects, usd(wc.PutsUSD))
				fmt.Fprintf(w, "  a Backend producing without pause, a PUT each %v: %d PUTs  %s per day\n",
					wal.DefaultCommitInterval, wc.BusyDayPuts, usd(wc.BusyDayUSD))
			}
			fmt.Fprintf(w, "prices: $%g/GB-month, $%g per 1,000 PUTs, $%g per 1,000 GETs, $%g/GB transfer\n",
				p.StorageGBMonth, p.PutPer1000, p.GetPer1000, p.TransferGB)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&storeURL, "store", "", "bucket URL")
	f.StringArrayVar(&partitions, "partition", nil, "a partition (TOPIC-PARTITION) to price (repeatable; default: all in the bucket)")
	f.BoolVar(&asJSON, "json", false, "print the estimate as JSON")
	f.Int64Var(&fetchBytes, "fetch-bytes", 1<<20, "bytes a consumer's remote read fetches per GET")
	f.Float64Var(&p.StorageGBMonth, "price-storage", p.StorageGBMonth, "USD per GB-month stored")
	f.Float64Var(&p.PutPer1000, "price-put", p.PutPer1000, "USD per 1,000 PUT/COPY/POST/LIST requests")
	f.Float64Var(&p.GetPer1000, "price-get", p.GetPer1000, "USD per 1,000 GET/HEAD requests")
	f.Float64Var(&p.TransferGB, "price-transfer", p.TransferGB, "USD per GB read out of the store (0: same region)")
	return cmd
}

// walCost is the estimate for the WAL objects of diskless topics: what
// is stored now, the PUTs they took, and a day of a Backend that has
// something to upload every default commit interval (its most: its PUT
// budget allows one a commit interval unless buffers fill).
type walCost struct {
	Objects      int     `json:"objects"`
	Bytes        int64   `json:"bytes"`
	StorageMonth float64 `json:"storagePerMonthUSD"`
	PutsUSD      float64 `json:"uploadUSD"`
	BusyDayPuts  int64   `json:"busyDayPuts"`
	BusyDayUSD   float64 `json:"busyDayUSD"`
}

func estimateWAL(objs []tiered.WALObject, p prices) walCost {
	c := walCost{Objects: len(objs), BusyDayPuts: int64(24 * time.Hour / wal.DefaultCommitInterval)}
	for _, o := range objs {
		c.Bytes += o.Size
	}
	c.StorageMonth = float64(c.Bytes) / gb * p.StorageGBMonth
	c.PutsUSD = float64(c.Objects) / 1000 * p.PutPer1000
	c.BusyDayUSD = float64(c.BusyDayPuts) / 1000 * p.PutPer1000
	return c
}

// usd formats dollars: cents above a cent, else enough digits to show the
// first two significant ones.
func usd(v float64) string {
	switch {
	case v >= 0.01:
		return fmt.Sprintf("$%.2f", v)
	case v == 0:
		return "$0"
	default:
		return "$" + strconv.FormatFloat(v, 'f', 2-int(math.Floor(math.Log10(v)))-1, 64)
	}
}
