package storeurl_test

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
	"github.com/tierlog/tierlog/testing/s3server"
)

var ctx = context.Background()

func TestBadURLs(t *testing.T) {
	dir := t.TempDir()
	for raw, want := range map[string]error{
		"ftp://x/y":                            objstore.ErrInvalidURL,
		"s3://":                                objstore.ErrInvalidURL,
		"s3://bucket/p?colour=blue":            objstore.ErrInvalidURL,
		"s3://user:secret@bucket/p":            objstore.ErrInvalidURL,
		"minio://bucket":                       objstore.ErrInvalidURL,
		"mem://":                               objstore.ErrInvalidURL,
		"file://host/dir":                      objstore.ErrInvalidURL,
		"file://" + filepath.Join(dir, "nope"): objstore.ErrBucketNotFound,
		"s3://b/p?part-size=-3":                objstore.ErrInvalidURL,
		"file://" + dir + "?create=maybe":      objstore.ErrInvalidURL,
		"%%%":                                  objstore.ErrInvalidURL,
	} {
		_, err := storeurl.Open(ctx, raw, objstore.Options{})
		if !errors.Is(err, want) {
			t.Errorf("%q: %v, want %v", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error shows the secret: %v", raw, err)
		}
	}
}

func TestFileAndMem(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bucket")
	s, err := storeurl.Open(ctx, "file://"+dir+"?create=true", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "a/b", bytes.NewReader([]byte("x")), 1, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	m1, _ := storeurl.Open(ctx, "mem://shared", objstore.Options{})
	m2, _ := storeurl.Open(ctx, "mem://shared", objstore.Options{})
	m1.Put(ctx, "k", bytes.NewReader([]byte("v")), 1, objstore.PutOptions{})
	if _, err := m2.Head(ctx, "k"); err != nil {
		t.Fatalf("mem://shared is not one bucket: %v", err)
	}
}

func TestS3AndMinIOURLs(t *testing.T) {
	for _, k := range []s3server.Kind{s3server.MinIO, s3server.VersityGW} {
		t.Run(string(k), func(t *testing.T) { testS3AndMinIOURLs(t, s3server.SharedKind(t, k)) })
	}
}

func testS3AndMinIOURLs(t *testing.T, srv *s3server.Server) {
	bucket := srv.NewBucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	ep := url.QueryEscape(srv.Endpoint)
	s3s, err := storeurl.Open(ctx, "s3://"+bucket+"/tier/prefix?endpoint="+ep+"&path-style=true", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3s.Put(ctx, "seg", bytes.NewReader([]byte("hello")), 5, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	ms, err := storeurl.Open(ctx, "minio://"+bucket+"/tier/prefix?endpoint="+ep, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ms.ReadAll(ctx, "seg", 0, -1)
	if err != nil || string(got) != "hello" {
		t.Fatalf("minio:// read what s3:// wrote under the same prefix: %q %v", got, err)
	}
	if _, err := storeurl.Open(ctx, "s3://no-such-bucket-xyz?endpoint="+ep+"&path-style=true", objstore.Options{}); !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Fatalf("missing bucket: %v", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	if _, err := storeurl.Open(ctx, "s3://"+bucket+"?endpoint="+ep+"&path-style=true", objstore.Options{}); !errors.Is(err, objstore.ErrAccessDenied) {
		t.Fatalf("wrong credentials: %v", err)
	}
}

// TestNoSecretInErrorsOrNames opens URLs with a secret in each place a
// store URL can hold one: no error, and no Redact of the URL, may show it,
// and Redact keeps what an operator needs (scheme, bucket, prefix, the
// endpoint's host and port, the harmless options).
func TestNoSecretInErrorsOrNames(t *testing.T) {
	for _, raw := range []string{
		"s3://AKIA:SekritPass@bucket/p",
		"s3://SekritUser@bucket/p",
		"s3://AKIA:Sekrit%zz@bucket",
		"s3://AKIA:SekritCtl\x01@bucket",
		"s3://AKIA:SekritPort/bucket",
		"s3://AKIA:Sekrit@bu cket/p",
		"s3:AKIA:SekritOpaque@bucket",
		"s3://bucket/p?endpoint=http://u:SekritEp@127.0.0.1:9000",
		"minio://bucket/p?endpoint=http://u:SekritEp@127.0.0.1:9000",
		"minio://bucket/p?endpoint=http://u:SekritEp%zz@127.0.0.1:9000",
		"s3://bucket/p?endpoint=" + url.QueryEscape("http://u:SekritEp@127.0.0.1:9000"),
		"s3://bucket/p?endpoint=" + url.QueryEscape("http://127.0.0.1:9000/?X-Amz-Security-Token=SekritTok"),
		"s3://bucket/p?endpoint=" + url.QueryEscape("http://127.0.0.1:9000#SekritFrag"),
		"s3://bucket/p?endpoint=" + url.QueryEscape("ftp://u:SekritEp@127.0.0.1:9000"),
		"s3://bucket/p?secret_key=SekritQ",
		"s3://bucket/p?session_token=SekritQ",
		"s3://bucket/p?access_key=SekritQ&secret=SekritQ&password=SekritQ",
		"s3://bucket/p?SekritBareWord",
		"s3://bucket/p?region=x;SekritSemicolon",
		"s3://bucket/p?region=SekritBad%zz",
		"s3://bucket/p#SekritFragment",
		"file://u:SekritFile@/tmp/nowhere",
		"mem://u:SekritMem@x",
	} {
		_, err := storeurl.Open(ctx, raw, objstore.Options{Timeout: time.Millisecond, MaxAttempts: 1})
		if !errors.Is(err, objstore.ErrInvalidURL) {
			t.Errorf("%q: %v, want ErrInvalidURL", raw, err)
		}
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "sekrit") {
			t.Errorf("%q: the error shows the secret: %v", raw, err)
		}
		if r := storeurl.Redact(raw); strings.Contains(strings.ToLower(r), "sekrit") {
			t.Errorf("Redact(%q) = %q shows the secret", raw, r)
		}
	}
	for raw, want := range map[string]string{
		"s3://k:s@bucket/tier/p?endpoint=http://u:p@127.0.0.1:9000&path-style=true&timeout=5s&token=t#f": "s3://bucket/tier/p?endpoint=http://127.0.0.1:9000&path-style=true&timeout=5s&token=xxxxx",
		"s3://bucket?endpoint=" + url.QueryEscape("https://h:9/x?q=1"):                                   "s3://bucket?endpoint=https://h:9/x",
		"minio://bucket/p?endpoint=http://127.0.0.1:9000&region=eu-west-1":                               "minio://bucket/p?endpoint=http://127.0.0.1:9000&region=eu-west-1",
		"s3://k:s%zz@bucket":   "s3://(unparsable URL)",
		"%%%":                  "(unparsable URL)",
		"s3://bucket?Secret=1": "s3://bucket?xxxxx=xxxxx",
	} {
		if got := storeurl.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}
