package fs_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/fs"
	"github.com/tierlog/tierlog/testing/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) *objstore.Store {
		d, err := fs.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return objstore.New(d, "file://test", objstore.Options{})
	}, objstoretest.Options{})
}

func TestMissingBucket(t *testing.T) {
	if _, err := fs.Open(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, objstore.ErrBucketNotFound) || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("open of a missing directory: %v", err)
	}
}
