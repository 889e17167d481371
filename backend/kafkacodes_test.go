package backend_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/tiered"
)

// sentinels is every sentinel of backend/errors.go with the code a broker
// answers it with: TestKafkaCodeEverySentinel fails on a sentinel added
// there and not here, so each new one gets a deliberate mapping. None
// maps to UNKNOWN_SERVER_ERROR; one that should must say why here (and
// the test's check let it).
var sentinels = map[string]struct {
	err  error
	code int16
}{
	"ErrOffsetOutOfRange":             {backend.ErrOffsetOutOfRange, backend.CodeOffsetOutOfRange},
	"ErrCorruptRecord":                {backend.ErrCorruptRecord, backend.CodeCorruptMessage},
	"ErrInvalidRecord":                {backend.ErrInvalidRecord, backend.CodeInvalidRecord},
	"ErrInvalidTimestamp":             {backend.ErrInvalidTimestamp, backend.CodeInvalidTimestamp},
	"ErrRecordTooLarge":               {backend.ErrRecordTooLarge, backend.CodeMessageTooLarge},
	"ErrRecordListTooLarge":           {backend.ErrRecordListTooLarge, backend.CodeRecordListTooLarge},
	"ErrUnsupportedForMessageFormat":  {backend.ErrUnsupportedForMessageFormat, backend.CodeUnsupportedForMessageFormat},
	"ErrOffsetMovedToTieredStorage":   {backend.ErrOffsetMovedToTieredStorage, backend.CodeOffsetMovedToTieredStorage},
	"ErrFenced":                       {backend.ErrFenced, backend.CodeNotLeaderOrFollower},
	"ErrWrongLeaderEpoch":             {backend.ErrWrongLeaderEpoch, backend.CodeNotLeaderOrFollower},
	"ErrNotLeader":                    {backend.ErrNotLeader, backend.CodeNotLeaderOrFollower},
	"ErrNotFound":                     {backend.ErrNotFound, backend.CodeUnknownTopicOrPartition},
	"ErrClosed":                       {backend.ErrClosed, backend.CodeNotLeaderOrFollower},
	"ErrInvalidName":                  {backend.ErrInvalidName, backend.CodeInvalidTopicException},
	"ErrInvalidConfig":                {backend.ErrInvalidConfig, backend.CodeInvalidConfig},
	"ErrStorage":                      {backend.ErrStorage, backend.CodeKafkaStorageError},
	"ErrManifestRolledBack":           {backend.ErrManifestRolledBack, backend.CodeKafkaStorageError},
	"ErrOutOfOrderSequence":           {backend.ErrOutOfOrderSequence, backend.CodeOutOfOrderSequenceNumber},
	"ErrInvalidProducerEpoch":         {backend.ErrInvalidProducerEpoch, backend.CodeInvalidProducerEpoch},
	"ErrInvalidTxnState":              {backend.ErrInvalidTxnState, backend.CodeInvalidTxnState},
	"ErrTransactionCoordinatorFenced": {backend.ErrTransactionCoordinatorFenced, backend.CodeTransactionCoordinatorFenced},
}

// parseDecls returns, for the package-level declarations of kind tok in
// file whose names start with prefix, each name's doc comment.
func parseDecls(t *testing.T, file string, tok token.Token, prefix string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != tok {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for _, n := range vs.Names {
				if strings.HasPrefix(n.Name, prefix) && n.IsExported() {
					out[n.Name] = vs.Doc.Text() + vs.Comment.Text()
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no %s %s* declared", file, tok, prefix)
	}
	return out
}

// TestKafkaCodeEverySentinel: every Err* of errors.go is in sentinels
// and maps to its code, bare or wrapped with %w, and its doc comment
// names that code (Kafka's name and number) and no other.
func TestKafkaCodeEverySentinel(t *testing.T) {
	docs := parseDecls(t, "errors.go", token.VAR, "Err")
	mention := regexp.MustCompile(`\b([A-Z][A-Z_]+[A-Z])\s+\((-?\d+)\)`)
	for name, doc := range docs {
		s, ok := sentinels[name]
		if !ok {
			t.Errorf("backend.%s has no mapping in this test's sentinels: give it a deliberate Kafka code in KafkaCode and here", name)
			continue
		}
		if s.code == backend.CodeUnknownServerError {
			t.Errorf("backend.%s maps to UNKNOWN_SERVER_ERROR: say why here if that is deliberate", name)
		}
		if got := backend.KafkaCode(s.err); got != s.code {
			t.Errorf("KafkaCode(%s) = %d, want %s (%d)", name, got, backend.KafkaCodeName(s.code), s.code)
		}
		wrapped := fmt.Errorf("partition t-0 at offset 7: %w", s.err)
		if got := backend.KafkaCode(wrapped); got != s.code {
			t.Errorf("KafkaCode(wrapped %s) = %d, want %d", name, got, s.code)
		}
		want := fmt.Sprintf("%s (%d)", backend.KafkaCodeName(s.code), s.code)
		found := false
		for _, m := range mention.FindAllStringSubmatch(doc, -1) {
			if got := m[1] + " (" + m[2] + ")"; got == want {
				found = true
			} else {
				t.Errorf("backend.%s's doc names %s, but it maps to %s", name, got, want)
			}
		}
		if !found {
			t.Errorf("backend.%s's doc does not name its code %s", name, want)
		}
	}
	for name := range sentinels {
		if _, ok := docs[name]; !ok {
			t.Errorf("sentinels names %s, which errors.go does not declare", name)
		}
	}
}

// TestKafkaCodeCases: nil, errors the backend does not know, the typed
// errors, and errors that match two sentinels (the more specific wins).
func TestKafkaCodeCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int16
	}{
		{"nil", nil, backend.CodeNone},
		{"unknown", errors.New("something else"), backend.CodeUnknownServerError},
		{"kafka's own", kerr.NotController, backend.CodeUnknownServerError},
		{"OffsetOutOfRangeError", &backend.OffsetOutOfRangeError{Offset: 9, LogStart: 0, LogEnd: 5}, backend.CodeOffsetOutOfRange},
		{"ConfigError", &backend.ConfigError{Key: "retention.ms", Value: "x", Reason: "not a number"}, backend.CodeInvalidConfig},
		{"OffsetMovedToTieredStorageError", &backend.OffsetMovedToTieredStorageError{Offset: 3, LocalLogStart: 10}, backend.CodeOffsetMovedToTieredStorage},
		{"RejectedBatchError timestamp", &backend.RejectedBatchError{Class: backend.ErrInvalidTimestamp, Index: -1, Cause: errors.New("record 0: timestamp too far ahead")}, backend.CodeInvalidTimestamp},
		{"RejectedBatchError corrupt", &backend.RejectedBatchError{Class: backend.ErrCorruptRecord, Index: -1, Cause: errors.New("crc")}, backend.CodeCorruptMessage},
		{"tiered.ErrNotLeader", fmt.Errorf("%w: t-0 (epoch 3)", tiered.ErrNotLeader), backend.CodeNotLeaderOrFollower},
		{"moved and out of range", errors.Join(backend.ErrOffsetOutOfRange, &backend.OffsetMovedToTieredStorageError{Offset: 3, LocalLogStart: 10}), backend.CodeOffsetMovedToTieredStorage},
		{"rolled back is a storage error", fmt.Errorf("%w: %w", backend.ErrStorage, backend.ErrManifestRolledBack), backend.CodeKafkaStorageError},
		{"corrupt bytes read from a failing disk", fmt.Errorf("%w: seg.log: %w", backend.ErrCorruptRecord, backend.ErrStorage), backend.CodeCorruptMessage},
		{"refused producer behind a storage error", fmt.Errorf("%w: %w", backend.ErrStorage, backend.ErrOutOfOrderSequence), backend.CodeOutOfOrderSequenceNumber},
		{"a disk failure while closing stays a storage error", fmt.Errorf("%w: %w", backend.ErrClosed, backend.ErrStorage), backend.CodeKafkaStorageError},
	} {
		if got := backend.KafkaCode(tc.err); got != tc.want {
			t.Errorf("%s: KafkaCode(%v) = %s (%d), want %s (%d)", tc.name, tc.err,
				backend.KafkaCodeName(got), got, backend.KafkaCodeName(tc.want), tc.want)
		}
	}
}

// TestKafkaCodeConstants: every Code* constant is Kafka's code of that
// name, as franz-go's kerr has it (kerr keeps 6's name from before Kafka
// 2.7, NOT_LEADER_FOR_PARTITION).
func TestKafkaCodeConstants(t *testing.T) {
	kafka := map[string]struct {
		code int16
		kerr *kerr.Error
	}{
		"CodeUnknownServerError":           {backend.CodeUnknownServerError, kerr.UnknownServerError},
		"CodeOffsetOutOfRange":             {backend.CodeOffsetOutOfRange, kerr.OffsetOutOfRange},
		"CodeCorruptMessage":               {backend.CodeCorruptMessage, kerr.CorruptMessage},
		"CodeUnknownTopicOrPartition":      {backend.CodeUnknownTopicOrPartition, kerr.UnknownTopicOrPartition},
		"CodeNotLeaderOrFollower":          {backend.CodeNotLeaderOrFollower, kerr.NotLeaderForPartition},
		"CodeMessageTooLarge":              {backend.CodeMessageTooLarge, kerr.MessageTooLarge},
		"CodeInvalidTopicException":        {backend.CodeInvalidTopicException, kerr.InvalidTopicException},
		"CodeRecordListTooLarge":           {backend.CodeRecordListTooLarge, kerr.RecordListTooLarge},
		"CodeInvalidTimestamp":             {backend.CodeInvalidTimestamp, kerr.InvalidTimestamp},
		"CodeInvalidConfig":                {backend.CodeInvalidConfig, kerr.InvalidConfig},
		"CodeUnsupportedForMessageFormat":  {backend.CodeUnsupportedForMessageFormat, kerr.UnsupportedForMessageFormat},
		"CodeOutOfOrderSequenceNumber":     {backend.CodeOutOfOrderSequenceNumber, kerr.OutOfOrderSequenceNumber},
		"CodeInvalidProducerEpoch":         {backend.CodeInvalidProducerEpoch, kerr.InvalidProducerEpoch},
		"CodeInvalidTxnState":              {backend.CodeInvalidTxnState, kerr.InvalidTxnState},
		"CodeTransactionCoordinatorFenced": {backend.CodeTransactionCoordinatorFenced, kerr.TransactionCoordinatorFenced},
		"CodeKafkaStorageError":            {backend.CodeKafkaStorageError, kerr.KafkaStorageError},
		"CodeInvalidRecord":                {backend.CodeInvalidRecord, kerr.InvalidRecord},
		"CodeOffsetMovedToTieredStorage":   {backend.CodeOffsetMovedToTieredStorage, kerr.OffsetMovedToTieredStorage},
	}
	renamed := map[int16]string{backend.CodeNotLeaderOrFollower: "NOT_LEADER_FOR_PARTITION"}
	declared := parseDecls(t, "kafkacodes.go", token.CONST, "Code")
	for name, doc := range declared {
		if name == "CodeNone" {
			if backend.CodeNone != 0 || backend.KafkaCodeName(0) != "NONE" || kerr.ErrorForCode(0) != nil {
				t.Errorf("CodeNone = %d (%s), want NONE (0)", backend.CodeNone, backend.KafkaCodeName(backend.CodeNone))
			}
			continue
		}
		k, ok := kafka[name]
		if !ok {
			t.Errorf("backend.%s is not in this test's table: compare it to kerr's", name)
			continue
		}
		if k.code != k.kerr.Code {
			t.Errorf("backend.%s = %d, kerr's %s is %d", name, k.code, k.kerr.Message, k.kerr.Code)
		}
		kname := backend.KafkaCodeName(k.code)
		if want := k.kerr.Message; kname != want && renamed[k.code] != want {
			t.Errorf("KafkaCodeName(%d) = %s, kerr's is %s", k.code, kname, want)
		}
		if !strings.HasPrefix(strings.TrimSpace(doc), kname) {
			t.Errorf("backend.%s's comment %q does not begin with its name %s", name, doc, kname)
		}
	}
	for name := range kafka {
		if _, ok := declared[name]; !ok {
			t.Errorf("the test's table names %s, which kafkacodes.go does not declare", name)
		}
	}
	if got := backend.KafkaCodeName(12345); got != "CODE_12345" {
		t.Errorf("KafkaCodeName(12345) = %s, want CODE_12345", got)
	}
}

// TestKafkaCodesDocTable: docs/embedding.md's table of errors and codes
// says what KafkaCode does: each row's errors map to the row's code, the
// code's name is Kafka's, and every sentinel of errors.go has a row.
func TestKafkaCodesDocTable(t *testing.T) {
	const doc = "../docs/embedding.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	// Errors of other packages the table may name, each matching a
	// backend sentinel.
	others := map[string]error{"tiered.ErrNotLeader": tiered.ErrNotLeader}
	lines := strings.Split(string(b), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == "| sentinel | Kafka error code | when |" {
			start = i + 2 // past the header's separator
			break
		}
	}
	if start < 0 {
		t.Fatalf("%s: no table with the header | sentinel | Kafka error code | when |", doc)
	}
	ident := regexp.MustCompile("`([A-Za-z.]+)`")
	codeCell := regexp.MustCompile("^`([A-Z_]+)` \\((-?\\d+)\\)$")
	listed := map[string]bool{}
	rows := 0
	for i := start; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		cells := strings.Split(strings.Trim(lines[i], "|"), "|")
		if len(cells) != 3 {
			t.Errorf("%s:%d: %d cells, want 3", doc, i+1, len(cells))
			continue
		}
		rows++
		m := codeCell.FindStringSubmatch(strings.TrimSpace(cells[1]))
		if m == nil {
			t.Errorf("%s:%d: code cell %q is not `NAME` (number)", doc, i+1, cells[1])
			continue
		}
		code, _ := strconv.Atoi(m[2])
		if got := backend.KafkaCodeName(int16(code)); got != m[1] {
			t.Errorf("%s:%d: code %d is %s, the table says %s", doc, i+1, code, got, m[1])
		}
		// The errors the row is about; a parenthesis says what comes
		// with them ("(with `ErrStorage`)").
		names, _, _ := strings.Cut(cells[0], "(")
		found := ident.FindAllStringSubmatch(names, -1)
		if len(found) == 0 {
			t.Errorf("%s:%d: no error named in %q", doc, i+1, cells[0])
		}
		for _, f := range found {
			name := f[1]
			var e error
			if s, ok := sentinels[name]; ok {
				e = s.err
				listed[name] = true
			} else if o, ok := others[name]; ok {
				e = o
			} else {
				t.Errorf("%s:%d: %s is not a backend sentinel (nor one this test knows)", doc, i+1, name)
				continue
			}
			if got := backend.KafkaCode(e); got != int16(code) {
				t.Errorf("%s:%d: the table says %s is %s (%d), KafkaCode says %s (%d)", doc, i+1, name, m[1], code, backend.KafkaCodeName(got), got)
			}
		}
	}
	if rows == 0 {
		t.Fatalf("%s: the errors table has no rows", doc)
	}
	var missing []string
	for name := range sentinels {
		if !listed[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s: the errors table has no row for %s", doc, strings.Join(missing, ", "))
	}
}
