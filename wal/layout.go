package wal

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// The bucket keys of WAL objects (frozen):
//
//	[<root>/]_wal/<writer 16 hex>/<sequence 20d>
//
// A partition's objects live under "<topic>-<partition>/", which never
// equals "_wal/" (a partition's folder always ends in "-<digits>"), and
// no WAL key is the folder of another.

// Dir is the folder of all writers' objects under a root.
const Dir = "_wal"

// Layout formats and parses WAL keys under one root.
type Layout struct{ root string }

// NewLayout returns the layout of WAL objects under root ("" for the
// bucket's top).
func NewLayout(root string) Layout { return Layout{root: strings.Trim(root, "/")} }

// Root is the root the layout was made with, its slashes trimmed.
func (l Layout) Root() string { return l.root }

// Prefix is the folder every WAL key begins with ("<root>/_wal/").
func (l Layout) Prefix() string {
	if l.root == "" {
		return Dir + "/"
	}
	return l.root + "/" + Dir + "/"
}

// WriterPrefix is the folder of one writer's objects.
func (l Layout) WriterPrefix(w WriterID) string { return l.Prefix() + w.String() + "/" }

// Key is the key of writer w's object at seq.
func (l Layout) Key(w WriterID, seq uint64) string {
	return l.WriterPrefix(w) + fmt.Sprintf("%020d", seq)
}

// Parse returns the writer and sequence number of a WAL key under l.
func (l Layout) Parse(key string) (WriterID, uint64, error) {
	rest, ok := strings.CutPrefix(key, l.Prefix())
	if !ok {
		return WriterID{}, 0, fmt.Errorf("wal: key %q is not under %q", key, l.Prefix())
	}
	w, s, ok := strings.Cut(rest, "/")
	id, err := ParseWriterID(w)
	if !ok || err != nil || len(s) != 20 {
		return WriterID{}, 0, fmt.Errorf("wal: key %q is not <writer 16 hex>/<sequence 20 digits>", key)
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 || seq > MaxSequence {
		return WriterID{}, 0, fmt.Errorf("wal: key %q has a bad sequence number", key)
	}
	return id, seq, nil
}

// ParseWriterID parses 16 hex digits.
func ParseWriterID(s string) (WriterID, error) {
	var id WriterID
	if len(s) != 2*IDLen {
		return id, fmt.Errorf("wal: writer id %q is not %d hex digits", s, 2*IDLen)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("wal: writer id %q is not %d hex digits", s, 2*IDLen)
	}
	return id, nil
}
