package tiered

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/local"
	"github.com/tierlog/tierlog/manifest"
	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/vfs"
)

// ReadManifest reads the committed manifest under prefix from store; a
// missing one is an empty manifest.
func ReadManifest(ctx context.Context, store *objstore.Store, prefix string) (*manifest.Manifest, error) {
	p := &Partition{store: store, prefix: prefix}
	st, err := p.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	return p.whole(ctx, st.head)
}

// Restore rebuilds a partition directory from the bucket alone (a lost disk,
// a new broker): every segment the committed manifest names is downloaded
// under Kafka's file names, each object checked against the CRC-32C the
// manifest recorded. dir is <log dir>/<topic>-<partition>; it must not
// exist or be empty. It returns the manifest it restored, and records the
// partition's recovery point (the restored log end) and log start (the
// manifest's) in the log directory's checkpoints, so that a Backend opens
// it as it was restored (a caller opening dir alone passes them itself).
//
// Restore holds the log directory's lock (local.LockFile) from before it
// writes anything: it takes it itself, failing with vfs.ErrLocked while
// another process (a broker, another restore) holds it, unless
// opts.Backend says the caller holds it. It builds the partition in a
// temporary directory beside dir ("<name>.restoring-<id>-delete", which
// tierlog does not list as a partition and Kafka deletes), fsyncs every
// file and the directory, and renames it to dir (fsyncing the log
// directory) only once every object is downloaded and checked: dir either
// does not exist or holds the whole restore. On any failure the temporary
// directory is removed; one left by a restore that was killed is removed
// by the next restore of the partition.
//
// Objects stream to disk (memory stays bounded whatever the segment size),
// and a body cut short resumes where it stopped.
func Restore(ctx context.Context, store *objstore.Store, prefix, dir string, opts RestoreOptions) (_ *manifest.Manifest, err error) {
	fsys := opts.fs()
	dir = filepath.Clean(dir)
	logDir, name := filepath.Dir(dir), filepath.Base(dir)
	if opts.Backend != nil {
		if filepath.Clean(opts.Backend.Dir()) != logDir {
			return nil, fmt.Errorf("tiered: restore into %s: RestoreOptions.Backend is the log directory %s, not %s", dir, opts.Backend.Dir(), logDir)
		}
	} else {
		if err := fsys.MkdirAll(logDir, 0o755); err != nil {
			return nil, fmt.Errorf("tiered: restore: create log dir: %w", err)
		}
		lock, err := fsys.Lock(filepath.Join(logDir, local.LockFile))
		if err != nil {
			return nil, fmt.Errorf("tiered: restore into %s: lock the log directory: %w", dir, err)
		}
		defer lock.Close()
	}
	if err := removeRestoring(fsys, logDir, name); err != nil {
		return nil, err
	}
	if ents, err := fsys.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("tiered: restore into %s: the directory is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	m, err := ReadManifest(ctx, store, prefix)
	if err != nil {
		return nil, err
	}
	if m.Generation == 0 { // every commit has a generation >= 1
		return nil, fmt.Errorf("%w under %q: nothing to restore (is the store URL or the partition right?)", ErrNoManifest, prefix)
	}
	if len(m.Segments) == 0 {
		return nil, fmt.Errorf("tiered: restore: the manifest under %q (generation %d) names no segments: nothing to restore", prefix, m.Generation)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	tmp := filepath.Join(logDir, restoringDirName(name, hex.EncodeToString(rnd[:])))
	if err := fsys.MkdirAll(tmp, 0o755); err != nil { // a name of its own: made here
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	defer func() {
		if err != nil {
			fsys.RemoveAll(tmp)
		}
	}()
	if opts.OnStart != nil {
		opts.OnStart(downloadBytes(m))
	}
	for _, s := range m.Segments {
		if err := DownloadSegment(ctx, store, prefix, s, tmp, opts); err != nil {
			return nil, err
		}
	}
	if err := restoreEpochs(fsys, m, tmp); err != nil {
		return nil, err
	}
	// Each file was fsynced before its rename; the renames are durable
	// once the directory is, and the partition once the log dir is.
	if err := syncDir(fsys, tmp); err != nil {
		return nil, err
	}
	if err := fsys.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) { // empty, checked above
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	if err := fsys.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("tiered: restore: %w", err)
	}
	if err := syncDir(fsys, logDir); err != nil {
		return nil, err
	}
	if err := restoredCheckpoints(fsys, m, logDir, name, opts.Backend); err != nil {
		return nil, err
	}
	return m, nil
}

// downloadBytes is what a restore of m downloads: every object but the
// leader epoch checkpoints, written from the manifest.
func downloadBytes(m *manifest.Manifest) int64 {
	var total int64
	for _, s := range m.Segments {
		for _, suf := range s.Objects() {
			if suf != manifest.EpochsSuffix {
				size, _ := s.Object(suf)
				total += size
			}
		}
	}
	return total
}

// restoredCheckpoints records the restored partition in the log
// directory's checkpoints, through the Backend holding it or in the files:
// its recovery point at the restored log end (every file is durable), so
// the open that follows trusts the restore rather than recovering every
// segment (which would drop the producer snapshots that hold producers
// whose records retention removed), and its log start, the manifest's.
// A directory name that is not a partition's records nothing: the caller
// opens it with the manifest's log start, as before.
func restoredCheckpoints(fsys vfs.FS, m *manifest.Manifest, logDir, name string, b *local.Backend) error {
	tp, err := local.ParsePartitionDirName(name)
	if err != nil {
		return nil
	}
	end := m.Segments[len(m.Segments)-1].LastOffset + 1
	start := max(m.LogStartOffset, m.Segments[0].BaseOffset)
	if b != nil {
		err = b.SetCheckpoints(tp.Topic, tp.Partition, end, start)
	} else {
		err = local.MergeCheckpoints(fsys, logDir, tp, end, start)
	}
	if err != nil {
		return fmt.Errorf("tiered: restore: the partition is restored, but the log directory's checkpoints could not record it: %w", err)
	}
	return nil
}

// restoringDirName is the temporary directory Restore builds the partition
// directory name in, id (16 hex digits) making it unique:
// "<name>.restoring-<id>-delete". tierlog does not take it for a partition
// directory (local.ParsePartitionDirName fails on it: its partition would
// be "delete"), and it has the form of a partition directory Kafka is
// deleting (<topic>-<partition>.<id>-delete), so a Kafka broker that finds
// one left by a killed restore deletes it rather than failing on an
// unknown directory. As Kafka does for its own, the topic is cut short
// when the name would pass 255 bytes.
func restoringDirName(name, id string) string { return restoringPrefix(name) + id + "-delete" }

const restoringInfix = ".restoring-"

// restoringPrefix is what every restoringDirName of name starts with.
func restoringPrefix(name string) string {
	const room = 255 - len(restoringInfix) - 16 - len("-delete")
	if len(name) <= room {
		return name + restoringInfix
	}
	if i := strings.LastIndexByte(name, '-'); i > 0 && len(name)-i < room { // keep "-<partition>"
		return name[:room-(len(name)-i)] + name[i:] + restoringInfix
	}
	return name[:room] + restoringInfix
}

// removeRestoring removes what restores of the partition name in logDir
// left behind when they were killed. REQUIRES: the log dir's lock held.
func removeRestoring(fsys vfs.FS, logDir, name string) error {
	ents, err := fsys.ReadDir(logDir)
	if err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	prefix := restoringPrefix(name)
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && strings.HasSuffix(e.Name(), "-delete") {
			if err := fsys.RemoveAll(filepath.Join(logDir, e.Name())); err != nil {
				return fmt.Errorf("tiered: restore: remove %s, left by a restore that was killed: %w", e.Name(), err)
			}
		}
	}
	return nil
}

func syncDir(fsys vfs.FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	return nil
}

// DownloadSegment downloads one segment the manifest names (every object
// it records but its leader-epoch checkpoint, which Restore writes once
// for the partition) into dir under Kafka's file names, as Restore does: streamed
// through temporary files, resumed when cut short, and renamed only once
// size and CRC-32C match the manifest (a mismatch is ErrCorruptRecord
// naming the object). It does not sync dir.
func DownloadSegment(ctx context.Context, store *objstore.Store, prefix string, s manifest.Segment, dir string, opts RestoreOptions) error {
	p := &Partition{store: store, prefix: prefix}
	buf := make([]byte, 1<<20)
	for _, suf := range s.Objects() {
		if suf == manifest.EpochsSuffix {
			continue // the partition's checkpoint is written once, from the manifest
		}
		size, crc := s.Object(suf)
		if err := restoreObject(ctx, store, opts.fs(), p.layout().Segment(s, suf), size, crc, filepath.Join(dir, localName(s, suf)), buf, opts.OnProgress); err != nil {
			return err
		}
	}
	return nil
}

// localName is the local file name of segment s's object with suffix:
// Kafka's, the producer snapshot named by the offset it describes (a
// leader-epoch checkpoint, which a partition directory holds one of, is
// given the segment's base offset).
func localName(s manifest.Segment, suffix string) string {
	switch suffix {
	case manifest.SnapshotSuffix:
		return local.FileName(s.LastOffset+1, local.SnapshotSuffix)
	case manifest.EpochsSuffix:
		return local.FileName(s.BaseOffset, manifest.EpochsSuffix)
	}
	return local.FileName(s.BaseOffset, localSuffix(suffix))
}

// localSuffix is the local file suffix of a segment object's.
func localSuffix(objectSuffix string) string {
	switch objectSuffix {
	case manifest.IndexSuffix:
		return local.IndexSuffix
	case manifest.TimeIndexSuffix:
		return local.TimeIndexSuffix
	case manifest.TxnIndexSuffix:
		return local.TxnIndexSuffix
	case manifest.SnapshotSuffix:
		return local.SnapshotSuffix
	}
	return local.LogSuffix
}

// restoreEpochs writes the restored partition's leader-epoch-checkpoint
// from the manifest's leader-epoch maps (a version 1 manifest has only
// each segment's highest epoch; the log rebuilds the rest from its
// batches when the file is missing, so then none is written).
func restoreEpochs(fsys vfs.FS, m *manifest.Manifest, dir string) error {
	var entries []local.EpochEntry
	for _, s := range m.Segments {
		if len(s.Epochs) == 0 {
			return nil
		}
		for _, e := range s.Epochs {
			if n := len(entries); n > 0 && e.Epoch <= entries[n-1].Epoch {
				continue
			}
			entries = append(entries, local.EpochEntry{Epoch: e.Epoch, StartOffset: max(e.StartOffset, m.LogStartOffset)})
		}
	}
	if err := vfs.WriteFileAtomic(fsys, dir, local.LeaderEpochCheckpoint, local.FormatLeaderEpochs(entries)); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	return nil
}

// RestoreOptions tune Restore.
type RestoreOptions struct {
	// Backend, when set, is the open log directory the partition directory
	// lies in: its owner holds the directory's lock, so Restore does not
	// take it. When nil, Restore takes the lock for its duration.
	Backend *local.Backend
	// OnStart, when set, is called once the manifest is read, with the
	// bytes Restore is about to download; OnProgress with the bytes of
	// each object as they are written to disk. For progress displays.
	OnStart    func(total int64)
	OnProgress func(n int64)
	// FS is the filesystem the partition is written to (default:
	// vfs.Default, the real disk; tests inject faults with
	// testing/faultfs).
	FS vfs.FS
}

func (o *RestoreOptions) fs() vfs.FS {
	if o.FS == nil {
		return vfs.Default
	}
	return o.FS
}

// restoreAttempts bounds how often one object's body may be cut short
// (each resumption is a new GET, itself retried by the store).
const restoreAttempts = 5

// restoreObject streams the object key (size bytes, CRC-32C want) into
// path through a temporary file, resuming a body cut short.
func restoreObject(ctx context.Context, store *objstore.Store, fsys vfs.FS, key string, size int64, want uint32,
	path string, buf []byte, progress func(int64)) (err error) {
	tmp := path + ".restoring"
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			fsys.Remove(tmp)
		}
	}()
	h := crc32.New(castagnoli)
	var off int64
	for cuts := 0; off < size; {
		rc, _, err := store.Get(ctx, key, off, size-off)
		if err != nil {
			return fmt.Errorf("tiered: restore %s: %w", key, err)
		}
		n, rerr, werr := copyBody(f, off, h, rc, buf, progress)
		rc.Close()
		off += n
		if werr != nil {
			return fmt.Errorf("tiered: restore %s: %w", key, werr)
		}
		if errors.Is(rerr, objstore.ErrCorrupt) {
			// The bytes fail a check (a sealed chunk's tag): another
			// read would fetch the same bytes.
			return fmt.Errorf("%w: tiered: restore %s at %d of %d bytes: %w", backend.ErrCorruptRecord, key, off, size, rerr)
		}
		if off < size {
			if err := ctx.Err(); err != nil {
				return err
			}
			if cuts++; cuts >= restoreAttempts {
				if rerr == nil {
					rerr = io.ErrUnexpectedEOF
				}
				// The store may answer whole next time: the caller retries.
				return fmt.Errorf("%w: tiered: restore %s: the body was cut short %d times, at %d of %d bytes: %w",
					objstore.ErrRetryable, key, cuts, off, size, rerr)
			}
		}
	}
	if got := h.Sum32(); got != want {
		return fmt.Errorf("%w: tiered: restore %s: %d bytes with CRC-32C %08x, the manifest recorded %08x", backend.ErrCorruptRecord, key, off, got, want)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("tiered: restore: %w", err)
	}
	return nil
}

// copyBody copies r to f from position at, and to h, until r ends or
// fails; a read error (a cut body) and a write error are told apart,
// since only the first is worth another GET.
func copyBody(f vfs.File, at int64, h hash.Hash32, r io.Reader, buf []byte, progress func(int64)) (n int64, rerr, werr error) {
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if _, werr = f.WriteAt(buf[:k], at+n); werr != nil {
				return n, nil, werr
			}
			h.Write(buf[:k])
			n += int64(k)
			if progress != nil {
				progress(int64(k))
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}
