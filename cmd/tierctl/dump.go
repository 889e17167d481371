package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/index"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/producerstate"
	"github.com/tierlog/tierlog/record"
)

type dumpOptions struct {
	printData  bool
	json       bool
	baseOffset offsetValue
}

func newDumpCmd() *cobra.Command {
	o := dumpOptions{baseOffset: offsetValue{unit: "offset"}}
	cmd := &cobra.Command{
		Use:   "dump FILE...",
		Short: "Print the batches of a .log, or the entries of an index, a .snapshot or a .txnindex",
		Long: `dump prints Kafka segment files in kafka-dump-log's line formats:

  .log        one line per batch (baseOffset, lastOffset, count, position,
              CreateTime, size, magic, compresscodec, crc, isvalid …);
              --print-data adds one "| offset: …" line per record
  .index      offset: 155 position: 16377
  .timeindex  timestamp: 1788026072512 offset: 155
  .snapshot   one line per producer: producerId: 7 producerEpoch: 0
              coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty
              lastTimestamp: … and, when the producer has a last batch,
              firstSequence: … lastSequence: … lastOffset: … offsetDelta: …
              timestamp: …
  .txnindex   version: 0 producerId: 7 firstOffset: 10 lastOffset: 15
              lastStableOffset: 10

Keys and values print as text when they are printable UTF-8, otherwise as
"base64:…". Trailing bytes that do not form a whole batch are reported, and
so are a snapshot that fails its CRC and a transaction index that fails
Kafka's sanity check. The base offset of an index comes from the 20-digit
file name (or --base-offset).`,
		Example: `  tierctl dump /var/kafka/orders-0/00000000000000000000.log
  tierctl dump --print-data 00000000000000000000.log
  tierctl dump --json 00000000000000000000.index | jq .position
  tierctl dump 00000000000000004800.snapshot 00000000000000000000.txnindex`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
			defer w.Flush()
			problems := false
			for _, path := range args {
				p, err := dumpFile(w, path, o, o.baseOffset.set)
				if err != nil {
					w.Flush()
					return err
				}
				problems = problems || p
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if problems {
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.printData, "print-data", false, "print every record (offset, timestamp, key, value, headers)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON lines instead of text")
	cmd.Flags().Var(&o.baseOffset, "base-offset", "base offset (>= 0) of an index file whose name does not carry it")
	return cmd
}

// fileKind tells which segment file a name is, looking through temporary
// suffixes (.deleted, .cleaned, .swap).
func fileKind(path string) string {
	name := filepath.Base(path)
	for _, s := range []string{local.DeletedSuffix, local.CleanedSuffix, local.SwapSuffix} {
		name = strings.TrimSuffix(name, s)
	}
	switch filepath.Ext(name) {
	case local.LogSuffix:
		return "log"
	case local.IndexSuffix:
		return "index"
	case local.TimeIndexSuffix:
		return "timeindex"
	case local.SnapshotSuffix:
		return "snapshot"
	case local.TxnIndexSuffix:
		return "txnindex"
	}
	return ""
}

func baseOffsetOf(path string, o dumpOptions, given bool) (int64, error) {
	if given {
		return o.baseOffset.v, nil
	}
	base, _, err := local.ParseFileName(filepath.Base(path))
	if err != nil {
		return 0, usagef("%s: cannot tell the segment's base offset from the name; pass --base-offset", path)
	}
	return base, nil
}

// dumpFile prints one file and reports whether it found problems.
func dumpFile(w *bufio.Writer, path string, o dumpOptions, baseGiven bool) (bool, error) {
	kind := fileKind(path)
	if kind == "" {
		return false, usagef("%s: not a .log, .index, .timeindex, .snapshot or .txnindex file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return false, usageError{err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, usageError{err}
	}
	if st.IsDir() {
		return false, usagef("%s is a directory; dump takes files (verify takes directories)", path)
	}
	if !o.json {
		fmt.Fprintf(w, "Dumping %s\n", path)
	}
	if kind == "log" {
		return dumpLog(w, f, st.Size(), path, o)
	}
	if kind == "snapshot" {
		data, err := io.ReadAll(f)
		if err != nil {
			return false, err
		}
		return dumpSnapshot(w, data, o), nil
	}
	base, err := baseOffsetOf(path, o, baseGiven)
	if err != nil {
		return false, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return false, err
	}
	if kind == "txnindex" {
		return dumpTxnIndex(w, data, base, o), nil
	}
	// Each index kind prints its entries the way kafka-dump-log does.
	var n, slots int
	var sanity error
	var line func(i int) (string, map[string]any)
	if kind == "index" {
		x := index.NewOffsetIndexView(data, base)
		n, slots, sanity = x.Entries(), len(data)/index.OffsetEntrySize, x.SanityCheck()
		line = func(i int) (string, map[string]any) {
			e := x.Entry(i)
			return fmt.Sprintf("offset: %d position: %d", e.Offset, e.Position), map[string]any{"offset": e.Offset, "position": e.Position}
		}
	} else {
		x := index.NewTimeIndexView(data, base)
		n, slots, sanity = x.Entries(), len(data)/index.TimeEntrySize, x.SanityCheck()
		line = func(i int) (string, map[string]any) {
			e := x.Entry(i)
			return fmt.Sprintf("timestamp: %d offset: %d", e.Timestamp, e.Offset), map[string]any{"timestamp": e.Timestamp, "offset": e.Offset}
		}
	}
	for i := 0; i < n; i++ {
		text, obj := line(i)
		if o.json {
			writeJSON(w, obj)
		} else {
			fmt.Fprintln(w, text)
		}
	}
	return reportIndexTail(w, path, sanity, slots-n, o), nil
}

// dumpSnapshot prints a producer snapshot's entries as kafka-dump-log
// does (DumpLogSegments.dumpProducerIdSnapshot, Kafka 3.5+: the open
// transaction's first offset prints as a Java OptionalLong; Kafka 3.4 and
// older printed None or Some(n)). A snapshot that does not decode (short,
// unknown version, CRC mismatch, a count that does not match its length)
// prints nothing but the problem. It reports whether there was one.
func dumpSnapshot(w *bufio.Writer, data []byte, o dumpOptions) bool {
	entries, err := producerstate.DecodeSnapshot(data)
	if err != nil {
		printFileProblem(w, o, err)
		return true
	}
	for _, e := range entries {
		m, hasBatch := snapshotBatch(e)
		if o.json {
			obj := map[string]any{
				"producerId": e.ProducerID, "producerEpoch": e.Epoch, "coordinatorEpoch": e.CoordinatorEpoch,
				"currentTxnFirstOffset": nil, "lastTimestamp": e.Timestamp,
			}
			if e.CurrentTxnFirstOffset >= 0 {
				obj["currentTxnFirstOffset"] = e.CurrentTxnFirstOffset
			}
			if hasBatch {
				obj["firstSequence"], obj["lastSequence"], obj["lastOffset"] = m.FirstSeq(), m.LastSeq, m.LastOffset
				obj["offsetDelta"], obj["timestamp"] = m.OffsetDelta, m.Timestamp
			}
			writeJSON(w, obj)
			continue
		}
		// Kafka prints the space after lastTimestamp whether or not a
		// batch follows.
		fmt.Fprintf(w, "producerId: %d producerEpoch: %d coordinatorEpoch: %d currentTxnFirstOffset: %s lastTimestamp: %d ",
			e.ProducerID, e.Epoch, e.CoordinatorEpoch, optionalLong(e.CurrentTxnFirstOffset), e.Timestamp)
		if hasBatch {
			fmt.Fprintf(w, "firstSequence: %d lastSequence: %d lastOffset: %d offsetDelta: %d timestamp: %d",
				m.FirstSeq(), m.LastSeq, m.LastOffset, m.OffsetDelta, m.Timestamp)
		}
		fmt.Fprintln(w)
	}
	return false
}

// snapshotBatch is the producer's last batch as Kafka reads it back from a
// snapshot entry: present when its last offset is >= 0.
func snapshotBatch(e producerstate.SnapshotEntry) (producerstate.BatchMetadata, bool) {
	return producerstate.BatchMetadata{LastSeq: e.LastSequence, OffsetDelta: e.OffsetDelta, LastOffset: e.LastOffset,
		Timestamp: e.Timestamp}, e.LastOffset >= 0
}

// optionalLong prints an offset where -1 means none as Java's OptionalLong
// does.
func optionalLong(v int64) string {
	if v < 0 {
		return "OptionalLong.empty"
	}
	return fmt.Sprintf("OptionalLong[%d]", v)
}

// dumpTxnIndex prints a transaction index's aborted transactions as
// kafka-dump-log does, then reports entries that do not decode (printing
// those before them) or that fail Kafka's sanity check against the
// segment's base offset. It reports whether there was a problem.
func dumpTxnIndex(w *bufio.Writer, data []byte, base int64, o dumpOptions) bool {
	entries, err := producerstate.DecodeTxnIndex(data)
	if err != nil {
		var fe *producerstate.FormatError
		if errors.As(err, &fe) {
			good := fe.Pos - fe.Pos%producerstate.TxnIndexEntrySize
			entries, _ = producerstate.DecodeTxnIndex(data[:good])
		}
	}
	for _, a := range entries {
		if o.json {
			writeJSON(w, map[string]any{"version": producerstate.TxnIndexVersion, "producerId": a.ProducerID,
				"firstOffset": a.FirstOffset, "lastOffset": a.LastOffset, "lastStableOffset": a.LastStableOffset})
			continue
		}
		fmt.Fprintf(w, "version: %d producerId: %d firstOffset: %d lastOffset: %d lastStableOffset: %d\n",
			producerstate.TxnIndexVersion, a.ProducerID, a.FirstOffset, a.LastOffset, a.LastStableOffset)
	}
	if err == nil {
		err = producerstate.SanityCheckTxnIndex(data, base)
	}
	if err != nil {
		printFileProblem(w, o, err)
		return true
	}
	return false
}

// printFileProblem prints what is wrong with a whole file, as the index
// dumps do.
func printFileProblem(w *bufio.Writer, o dumpOptions, err error) {
	if o.json {
		writeJSON(w, map[string]any{"problem": err.Error()})
		return
	}
	fmt.Fprintf(w, "Problem: %v\n", err)
}

// reportIndexTail notes unused (zero) slots and reports slots that break the
// order; only the latter is a problem.
func reportIndexTail(w *bufio.Writer, path string, sanity error, unused int, o dumpOptions) bool {
	if sanity != nil {
		printFileProblem(w, o, sanity)
		return true
	}
	if unused > 0 && !o.json {
		fmt.Fprintf(w, "%s has %d unused (zero) slots after its last entry: a preallocated index of an active segment\n", filepath.Base(path), unused)
	}
	return false
}

func dumpLog(w *bufio.Writer, f *os.File, size int64, path string, o dumpOptions) (bool, error) {
	s := record.NewScanner(f, 0, size, record.ScanOptions{})
	var it record.Iterator
	lastPos := int64(-1)
	order := local.NewSegmentOrder(0, math.MaxInt64, false) // a file not named by its base offset
	base, _, nameErr := local.ParseFileName(filepath.Base(path))
	if nameErr == nil {
		order = local.LocalSegmentOrder(base)
		if !o.json {
			fmt.Fprintf(w, "Log starting offset: %d\n", base)
		}
	}
	problems := false
	for s.Next() {
		e := s.Entry()
		valid := validateEntry(e) == nil
		problems = problems || !valid
		printBatch(w, e, valid, o)
		if err := order.Check(e); err != nil {
			problems = true
			printProblem(w, o, fmt.Sprintf("%s: %v", filepath.Base(path), err))
		}
		lastPos = e.Position
		if !o.printData {
			continue
		}
		if err := it.Reset(e.Data); err != nil {
			problems = true
			printProblem(w, o, fmt.Sprintf("records at position %d: %v", e.Position, err))
			continue
		}
		for it.Next() {
			printRecord(w, e, it.Record(), o)
		}
		if err := it.Err(); err != nil {
			problems = true
			printProblem(w, o, fmt.Sprintf("records at position %d: %v", e.Position, err))
		}
	}
	if err := s.Err(); err != nil {
		var be *record.BatchError
		if !errors.As(err, &be) {
			return problems, err
		}
		printProblem(w, o, fmt.Sprintf("Found %d invalid bytes at the end of %s (%v)", size-s.ValidEnd(), filepath.Base(path), err))
		problems = true
	}
	if next, ok := nextSegmentBase(path); nameErr == nil && ok && lastPos >= 0 && order.Next()-1 >= next {
		printProblem(w, o, fmt.Sprintf("%s position %d: the last batch ends at offset %d, at or past %s, the next segment's base",
			filepath.Base(path), lastPos, order.Next()-1, local.FileName(next, local.LogSuffix)))
		problems = true
	}
	return problems, nil
}

// nextSegmentBase returns the base offset of the segment after the one
// whose .log is path, from the names of the .log files beside it; false
// when there is none (the last segment, or a file on its own).
func nextSegmentBase(path string) (int64, bool) {
	base, _, err := local.ParseFileName(filepath.Base(path))
	if err != nil {
		return 0, false
	}
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return 0, false
	}
	next, found := int64(0), false
	for _, e := range ents {
		b, suffix, err := local.ParseFileName(e.Name())
		if err == nil && suffix == local.LogSuffix && b > base && (!found || b < next) {
			next, found = b, true
		}
	}
	return next, found
}

func validateEntry(e *record.Entry) error {
	if e.Magic == 2 {
		return e.Batch().Validate()
	}
	return record.LegacyEntry(e.Data).Validate()
}

func printProblem(w *bufio.Writer, o dumpOptions, msg string) {
	if o.json {
		writeJSON(w, map[string]any{"problem": msg})
		return
	}
	fmt.Fprintln(w, msg)
}

func timestampTypeName(e *record.Entry) string {
	switch {
	case e.Magic == 0:
		return "NoTimestampType"
	case e.Magic == 2:
		return e.Batch().TimestampType().String()
	default:
		return record.LegacyEntry(e.Data).TimestampType().String()
	}
}

func printBatch(w *bufio.Writer, e *record.Entry, valid bool, o dumpOptions) {
	tsType := timestampTypeName(e)
	if e.Magic == 2 {
		b := e.Batch()
		horizon := "OptionalLong.empty"
		if h, ok := b.DeleteHorizon(); ok {
			horizon = fmt.Sprintf("OptionalLong[%d]", h)
		}
		if o.json {
			m := map[string]any{
				"baseOffset": b.BaseOffset(), "lastOffset": b.LastOffset(), "count": b.NumRecords(),
				"baseSequence": b.BaseSequence(), "lastSequence": b.LastSequence(),
				"producerId": b.ProducerID(), "producerEpoch": b.ProducerEpoch(),
				"partitionLeaderEpoch": b.PartitionLeaderEpoch(), "isTransactional": b.IsTransactional(),
				"isControl": b.IsControl(), "position": e.Position, "timestampType": tsType,
				"maxTimestamp": b.MaxTimestamp(), "size": e.Size, "magic": e.Magic,
				"compressCodec": b.Codec().String(), "crc": b.CRC(), "isValid": valid,
			}
			if h, ok := b.DeleteHorizon(); ok {
				m["deleteHorizonMs"] = h
			}
			writeJSON(w, m)
			return
		}
		fmt.Fprintf(w, "baseOffset: %d lastOffset: %d count: %d baseSequence: %d lastSequence: %d producerId: %d producerEpoch: %d partitionLeaderEpoch: %d isTransactional: %t isControl: %t deleteHorizonMs: %s",
			b.BaseOffset(), b.LastOffset(), b.NumRecords(), b.BaseSequence(), b.LastSequence(), b.ProducerID(),
			b.ProducerEpoch(), b.PartitionLeaderEpoch(), b.IsTransactional(), b.IsControl(), horizon)
		fmt.Fprintf(w, " position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d isvalid: %t\n",
			e.Position, tsType, b.MaxTimestamp(), e.Size, e.Magic, b.Codec(), b.CRC(), valid)
		return
	}
	le := record.LegacyEntry(e.Data)
	if o.json {
		writeJSON(w, map[string]any{
			"offset": e.LastOffset, "position": e.Position, "timestampType": tsType, "maxTimestamp": le.Timestamp(),
			"size": e.Size, "magic": e.Magic, "compressCodec": le.Codec().String(), "crc": le.CRC(), "isValid": valid,
		})
		return
	}
	fmt.Fprintf(w, "offset: %d position: %d %s: %d size: %d magic: %d compresscodec: %s crc: %d isvalid: %t\n",
		e.LastOffset, e.Position, tsType, le.Timestamp(), e.Size, e.Magic, le.Codec(), le.CRC(), valid)
}

func printRecord(w *bufio.Writer, e *record.Entry, r *record.Record, o dumpOptions) {
	keys := make([]string, len(r.Headers))
	for i, h := range r.Headers {
		keys[i] = string(h.Key)
	}
	if o.json {
		m := map[string]any{
			"offset": r.Offset, "timestamp": r.Timestamp, "keySize": size(r.Key), "valueSize": size(r.Value),
			"key": printable(r.Key), "payload": printable(r.Value),
		}
		if e.Magic == 2 {
			m["sequence"] = r.Sequence
			m["headerKeys"] = keys
		}
		writeJSON(w, m)
		return
	}
	fmt.Fprintf(w, "| offset: %d %s: %d keySize: %d valueSize: %d", r.Offset, timestampTypeName(e), r.Timestamp, size(r.Key), size(r.Value))
	if e.Magic == 2 {
		fmt.Fprintf(w, " sequence: %d headerKeys: [%s]", r.Sequence, strings.Join(keys, ","))
		if e.Batch().IsControl() {
			if ct, err := record.ParseControlKey(r.Key); err == nil {
				fmt.Fprintf(w, " controlType: %s", ct)
			}
		}
	}
	fmt.Fprintf(w, " key: %s payload: %s\n", printableOrNull(r.Key), printableOrNull(r.Value))
}

func size(b []byte) int {
	if b == nil {
		return -1
	}
	return len(b)
}

// printable returns b as text when it is printable UTF-8, else "base64:…";
// nil stays nil (JSON null).
func printable(b []byte) any {
	if b == nil {
		return nil
	}
	if utf8.Valid(b) {
		ok := true
		for _, r := range string(b) {
			if !unicode.IsPrint(r) && r != '\t' {
				ok = false
				break
			}
		}
		if ok {
			return string(b)
		}
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

func printableOrNull(b []byte) string {
	if b == nil {
		return "null"
	}
	return printable(b).(string)
}

func writeJSON(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{"problem":` + strconv.Quote(err.Error()) + `}`)
	}
	w.Write(append(b, '\n'))
}
