package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
)

// writeKeys writes a key file of lines made by tierctl key new, the last
// id active, readable by its owner only.
func writeKeys(t *testing.T, path string, lines map[string]string, ids ...string) {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		if lines[id] == "" {
			code, out, errOut := tierctl(t, "key", "new", id)
			if code != 0 || !strings.HasPrefix(out, "key "+id+" ") {
				t.Fatalf("key new: exit %d %q %s", code, out, errOut)
			}
			lines[id] = strings.TrimSpace(out)
		}
		b.WriteString(lines[id] + "\n")
	}
	b.WriteString("active " + ids[len(ids)-1] + "\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// keyFile writes a key file of one new key and returns its path.
func keyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys")
	writeKeys(t, path, map[string]string{}, "k1")
	return path
}

// TestSealedBucketCommands: offload to a sealed bucket, read it with the
// key file (ls, consume, verify --deep, restore), not without it, rotate
// the key with rekey (a dry run, then --apply), and read it with the new
// key only.
func TestSealedBucketCommands(t *testing.T) {
	root := t.TempDir()
	logs, bucket, keys := filepath.Join(root, "logs"), filepath.Join(root, "bucket"), filepath.Join(root, "keys")
	lines := map[string]string{}
	writeKeys(t, keys, lines, "k1")
	if code, _, errOut := tierctl(t, "produce", logs, "--partition", "orders-0", "--count", "5000", "--record-size", "200",
		"--config", "segment.bytes=262144"); code != 0 {
		t.Fatalf("produce: %s", errOut)
	}
	part := filepath.Join(logs, "orders-0")
	store := "file://" + bucket
	if code, _, errOut := tierctl(t, "offload", part, "--store", store+"?create=true", "--key-file", keys, "--config", "local.retention.ms=0"); code != 0 {
		t.Fatalf("offload: exit %d %s", code, errOut)
	}
	// No object in the bucket is a Kafka segment's plaintext.
	filepath.WalkDir(bucket, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir // the fs driver's own
		}
		if err == nil && !d.IsDir() && !strings.Contains(path, "_tierlog") {
			b, _ := os.ReadFile(path)
			if !bytes.HasPrefix(b, []byte("\xffTLSEAL")) {
				t.Errorf("%s is not sealed", path)
			}
		}
		return nil
	})
	if code, out, errOut := tierctl(t, "consume", part, "--store", store, "--key-file", keys, "--quiet"); code != 0 || strings.TrimSpace(out) != "5000" {
		t.Fatalf("consume with the key: exit %d %q %s", code, out, errOut)
	}
	t.Setenv("TIERCTL_KEY_FILE", keys)
	if code, out, errOut := tierctl(t, "verify", "--store", store, "--deep"); code != 0 || strings.Contains(out, "retired") {
		t.Fatalf("verify --deep with the key (TIERCTL_KEY_FILE): exit %d\n%s%s", code, out, errOut)
	}
	os.Unsetenv("TIERCTL_KEY_FILE")
	code, out, errOut := tierctl(t, "consume", part, "--store", store, "--quiet")
	if code == 0 || !strings.Contains(errOut, "the object is sealed (client-side encrypted): open the store with its key file") {
		t.Fatalf("consume without the key: exit %d %q %s", code, out, errOut)
	}

	// Rotate: k2 active, k1 kept for reading.
	writeKeys(t, keys, lines, "k1", "k2")
	code, out, errOut = tierctl(t, "key", "list", "--store", store, "--key-file", keys)
	if code != 0 || !strings.Contains(out, "wrapped by k1 (retired") {
		t.Fatalf("key list: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tierctl(t, "verify", "--store", store, "--key-file", keys, "--deep")
	if code != 0 || !strings.Contains(out, "wrapped by the retired key k1") {
		t.Fatalf("verify --deep after the rotation: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tierctl(t, "rekey", "--store", store, "--key-file", keys)
	if code != 0 || !strings.Contains(out, "would re-wrap from k1 to k2") || !strings.Contains(out, "dry run") {
		t.Fatalf("rekey (dry run): exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tierctl(t, "rekey", "--store", store, "--key-file", keys, "--apply")
	if code != 0 || !strings.Contains(out, "re-wrapped from k1 to k2") {
		t.Fatalf("rekey --apply: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = tierctl(t, "rekey", "--store", store, "--key-file", keys, "--apply")
	if code != 0 || !strings.Contains(out, "under k2 already") {
		t.Fatalf("rekey --apply again: exit %d\n%s%s", code, out, errOut)
	}

	// k1 gone from the file: everything still reads.
	writeKeys(t, keys, lines, "k2")
	if code, out, errOut := tierctl(t, "verify", "--store", store, "--key-file", keys, "--deep"); code != 0 || strings.Contains(out, "retired") {
		t.Fatalf("verify --deep with k2 only: exit %d\n%s%s", code, out, errOut)
	}
	restored := filepath.Join(root, "restored")
	if code, _, errOut := tierctl(t, "restore", restored, "--store", store, "--key-file", keys, "--partition", "orders-0"); code != 0 {
		t.Fatalf("restore with k2 only: exit %d %s", code, errOut)
	}
	if code, out, errOut := tierctl(t, "consume", filepath.Join(restored, "orders-0"), "--quiet"); code != 0 || strings.TrimSpace(out) == "0" {
		t.Fatalf("consume of the restored partition: exit %d %q %s", code, out, errOut)
	}

	// Only k9: every read names the key it lacks.
	writeKeys(t, keys, lines, "k9")
	code, out, errOut = tierctl(t, "verify", "--store", store, "--key-file", keys, "--deep")
	if code == 0 || !strings.Contains(out+errOut, `key "k2"`) {
		t.Fatalf("verify without k2: exit %d\n%s%s", code, out, errOut)
	}
	// A key file others may read is refused, saying so.
	os.Chmod(keys, 0o644)
	code, _, errOut = tierctl(t, "ls", part, "--store", store, "--key-file", keys)
	if code != 2 || !strings.Contains(errOut, "chmod 600") {
		t.Fatalf("a key file others read: exit %d %s", code, errOut)
	}
}

// rekey and key list take a key file given as the URL's key-file= option.
func TestKeyCommandsTakeTheURLsKeyFile(t *testing.T) {
	keys := keyFile(t)
	store := "file://" + filepath.Join(t.TempDir(), "bucket") + "?create=true&key-file=" + url.QueryEscape(keys)
	for _, args := range [][]string{{"key", "list", "--store", store}, {"rekey", "--store", store}} {
		if code, out, errOut := tierctl(t, args...); code != 0 {
			t.Errorf("%v: exit %d %s%s", args[:2], code, out, errOut)
		}
	}
}

// TestSealTopicsURL: a bucket holding a sealed partition and a plaintext
// one, read and written through a URL with seal=topics: every command
// reads both, an offload to each keeps its kind, verify --deep finds
// nothing wrong, and reports an object of the other kind than its
// partition.
func TestSealTopicsURL(t *testing.T) {
	root := t.TempDir()
	logs, bucket, keys := filepath.Join(root, "logs"), filepath.Join(root, "bucket"), filepath.Join(root, "keys")
	writeKeys(t, keys, map[string]string{}, "k1")
	store := "file://" + bucket
	topics := store + "?key-file=" + url.QueryEscape(keys) + "&seal=topics"
	produce := func(partition string) {
		t.Helper()
		if code, _, errOut := tierctl(t, "produce", logs, "--partition", partition, "--count", "2000", "--record-size", "200",
			"--config", "segment.bytes=131072"); code != 0 {
			t.Fatalf("produce: %s", errOut)
		}
	}
	offload := func(partition, url string) {
		t.Helper()
		if code, _, errOut := tierctl(t, "offload", filepath.Join(logs, partition), "--store", url, "--config", "local.retention.ms=0"); code != 0 {
			t.Fatalf("offload %s: exit %d %s", partition, code, errOut)
		}
	}
	kinds := func(partition string) (sealed, plain int) {
		t.Helper()
		filepath.WalkDir(filepath.Join(bucket, partition), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				b, _ := os.ReadFile(path)
				if bytes.HasPrefix(b, []byte("\xffTLSEAL")) {
					sealed++
				} else {
					plain++
				}
			}
			return nil
		})
		return sealed, plain
	}
	produce("orders-0")
	produce("events-0")
	offload("orders-0", store+"?create=true&key-file="+url.QueryEscape(keys)) // seal=all: a sealed partition
	offload("events-0", store)                                                // no key: a plaintext one
	produce("orders-0")
	produce("events-0")
	offload("orders-0", topics)
	offload("events-0", topics)
	if s, p := kinds("orders-0"); s == 0 || p != 0 {
		t.Fatalf("orders-0: %d sealed objects, %d not: want all sealed", s, p)
	}
	if s, p := kinds("events-0"); s != 0 || p == 0 {
		t.Fatalf("events-0: %d sealed objects, %d not: want none sealed", s, p)
	}
	for _, partition := range []string{"orders-0", "events-0"} {
		if code, out, errOut := tierctl(t, "consume", filepath.Join(logs, partition), "--store", topics, "--quiet"); code != 0 || strings.TrimSpace(out) != "4000" {
			t.Fatalf("consume %s: exit %d %q %s", partition, code, out, errOut)
		}
		restored := filepath.Join(root, "restored-"+partition)
		if code, _, errOut := tierctl(t, "restore", restored, "--store", topics, "--partition", partition); code != 0 {
			t.Fatalf("restore %s: exit %d %s", partition, code, errOut)
		}
	}
	if code, out, errOut := tierctl(t, "verify", "--store", topics, "--deep"); code != 0 || strings.Contains(out, "not sealed") {
		t.Fatalf("verify --deep: exit %d\n%s%s", code, out, errOut)
	}
	// An object of the sealed partition replaced by a plaintext one (what
	// a bucket writer could do), and one of the plaintext partition
	// sealed in place (under its own name, so that it opens): both
	// reported.
	var sealedObj, plainObj string
	filepath.WalkDir(bucket, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".index") {
			if strings.Contains(path, "orders-0") && sealedObj == "" {
				sealedObj = path
			} else if strings.Contains(path, "events-0") && plainObj == "" {
				plainObj = path
			}
		}
		return nil
	})
	plainBytes, _ := os.ReadFile(plainObj)
	os.WriteFile(sealedObj, plainBytes, 0o644)
	all, err := storeurl.Open(context.Background(), store+"?key-file="+url.QueryEscape(keys), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(bucket, plainObj)
	if _, err := all.Put(context.Background(), filepath.ToSlash(rel), bytes.NewReader(plainBytes), int64(len(plainBytes)), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	all.Close()
	code, out, errOut := tierctl(t, "verify", "--store", topics)
	if code == 0 || !strings.Contains(out, "not sealed, in a partition whose manifest is") || !strings.Contains(out, "sealed, in a partition whose manifest is not") {
		t.Fatalf("verify of swapped objects: exit %d\n%s%s", code, out, errOut)
	}
}

// TestOffloadTakesTheSealConfig: offload of a partition the bucket has
// no manifest of, with --config remote.storage.seal.enable=true, seals
// it under seal=topics, and is refused, writing nothing, with no key file.
func TestOffloadTakesTheSealConfig(t *testing.T) {
	for _, withKey := range []bool{true, false} {
		root := t.TempDir()
		logs, bucket, keys := filepath.Join(root, "logs"), filepath.Join(root, "bucket"), filepath.Join(root, "keys")
		writeKeys(t, keys, map[string]string{}, "k1")
		u := "file://" + bucket + "?create=true"
		if withKey {
			u += "&key-file=" + url.QueryEscape(keys) + "&seal=topics"
		}
		if code, _, errOut := tierctl(t, "produce", logs, "--partition", "secret-0", "--count", "2000", "--record-size", "200",
			"--config", "segment.bytes=131072"); code != 0 {
			t.Fatalf("produce: %s", errOut)
		}
		code, _, errOut := tierctl(t, "offload", filepath.Join(logs, "secret-0"), "--store", u,
			"--config", "local.retention.ms=0", "--config", "remote.storage.seal.enable=true")
		sealed, plain := 0, 0
		filepath.WalkDir(filepath.Join(bucket, "secret-0"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				if b, _ := os.ReadFile(path); bytes.HasPrefix(b, []byte("\xffTLSEAL")) {
					sealed++
				} else {
					plain++
				}
			}
			return nil
		})
		switch {
		case withKey && (code != 0 || plain != 0 || sealed == 0):
			t.Fatalf("seal=topics: exit %d %s; %d sealed objects, %d plaintext", code, errOut, sealed, plain)
		case !withKey && (code == 0 || sealed+plain != 0 || !strings.Contains(errOut, "remote.storage.seal.enable")):
			t.Fatalf("no key file: exit %d %q; %d objects written", code, errOut, sealed+plain)
		}
	}
}
