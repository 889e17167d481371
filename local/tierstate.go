package local

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tierlog/tierlog/vfs"
)

// TierStateCheckpoint is the file in a tiered partition's directory that
// records what the partition last knew of its bucket (TierState). The
// name is tierlog's own (Kafka keeps no such file); Kafka ignores it.
const TierStateCheckpoint = "tier-state-checkpoint"

// TierState is what a tiered partition last knew of its bucket: the
// manifest generation it last committed or adopted, and where the
// bucket's part of the log and the partition began and ended then. The
// tiered layer refuses a manifest that contradicts it (a bucket that went
// back in time, or another partition's). The file uses Kafka's checkpoint
// text format, one entry, its lineage (16 hex digits) only when the
// manifest had one (a build before lineages reads the four fields):
//
//	0
//	1
//	<generation> <born> <remote end> <log start> [<lineage>]
type TierState struct {
	// Generation is the manifest generation; Born the generation its
	// incarnation of the partition began at (0: the first).
	Generation uint64
	Born       uint64
	// RemoteEnd is the offset after the bucket's last segment (its log
	// start when it names none).
	RemoteEnd int64
	// LogStart is the partition's log start: the manifest's, or the
	// local log's when a DeleteRecords moved it past the bucket's end.
	LogStart int64
	// Lineage is the manifest's (manifest.Manifest.Lineage); zero when
	// it had none.
	Lineage [8]byte
}

// ReadTierState reads dir's tier-state-checkpoint; ok is false when the
// file does not exist (a partition that has committed or adopted no
// manifest, or one written before the file existed).
func ReadTierState(dir string) (st TierState, ok bool, err error) {
	return readTierState(vfs.Default, dir)
}

// WriteTierState writes dir's tier-state-checkpoint durably (tmp, fsync,
// rename, fsync of dir). For tools: a Log's is Log.WriteTierState.
func WriteTierState(dir string, st TierState) error {
	return writeTierState(vfs.Default, dir, st)
}

// TierState reads the log's tier-state-checkpoint; see ReadTierState.
func (sg Segments) TierState() (TierState, bool, error) {
	return readTierState(sg.l.segOpts.fs, sg.l.dir)
}

// WriteTierState writes the log's tier-state-checkpoint durably. A
// read-only log returns ErrReadOnly and writes nothing. A failed write
// fails the log (it refuses writes, deletions included, until reopened):
// the tiered layer records a manifest before it deletes anything on its
// strength, and must not delete on a record that may not be on disk.
func (sg Segments) WriteTierState(st TierState) error {
	l := sg.l
	if err := l.checkWritable(); err != nil {
		return err
	}
	if err := writeTierState(l.segOpts.fs, l.dir, st); err != nil {
		return l.fail(err)
	}
	return nil
}

func readTierState(fsys vfs.FS, dir string) (TierState, bool, error) {
	path := filepath.Join(dir, TierStateCheckpoint)
	data, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return TierState{}, false, nil
	}
	if err != nil {
		return TierState{}, false, fmt.Errorf("local: read %s: %w", path, err)
	}
	rows, err := parseCheckpointFields(path, data, 4, 5)
	if err != nil {
		return TierState{}, false, err
	}
	if len(rows) != 1 {
		return TierState{}, false, fmt.Errorf("%w: %s: %d entries, want 1", ErrBadCheckpoint, path, len(rows))
	}
	r := rows[0]
	gen, err1 := strconv.ParseUint(r[0], 10, 64)
	born, err2 := strconv.ParseUint(r[1], 10, 64)
	end, err3 := strconv.ParseInt(r[2], 10, 64)
	start, err4 := strconv.ParseInt(r[3], 10, 64)
	st := TierState{Generation: gen, Born: born, RemoteEnd: end, LogStart: start}
	var err5 error
	if len(r) == 5 {
		var lin []byte
		if lin, err5 = hex.DecodeString(r[4]); err5 == nil && (len(lin) != 8 || [8]byte(lin) == ([8]byte{})) {
			err5 = errors.New("a lineage is 8 bytes, not zero")
		}
		if err5 == nil {
			st.Lineage = [8]byte(lin)
		}
	}
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || born > gen || end < 0 || start < 0 {
		return TierState{}, false, fmt.Errorf("%w: %s entry 1: %q", ErrBadCheckpoint, path, strings.Join(r, " "))
	}
	return st, true, nil
}

func writeTierState(fsys vfs.FS, dir string, st TierState) error {
	data := fmt.Sprintf("0\n1\n%d %d %d %d\n", st.Generation, st.Born, st.RemoteEnd, st.LogStart)
	if st.Lineage != ([8]byte{}) {
		data = fmt.Sprintf("0\n1\n%d %d %d %d %x\n", st.Generation, st.Born, st.RemoteEnd, st.LogStart, st.Lineage)
	}
	if err := vfs.WriteFileAtomic(fsys, dir, TierStateCheckpoint, []byte(data)); err != nil {
		return fmt.Errorf("local: write %s in %s: %w", TierStateCheckpoint, dir, err)
	}
	return nil
}
