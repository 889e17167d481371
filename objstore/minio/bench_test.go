package minio_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	mc "github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/minio"
	"github.com/tierlog/tierlog/testing/s3server"
)

const benchObject = 256 << 20

func benchData() []byte {
	b := make([]byte, benchObject)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// benchSetup opens a Store with 16 MiB parts and a bare minio-go client on
// a fresh bucket.
func benchSetup(b *testing.B) (*objstore.Store, *mc.Client, string) {
	srv := s3server.Shared(b)
	c := minio.Config{Bucket: s3server.BucketName(b), Endpoint: srv.Endpoint, Region: srv.Region,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: 16 << 20}
	ctx := context.Background()
	if err := minio.CreateBucket(ctx, c); err != nil {
		b.Fatal(err)
	}
	d, err := minio.Open(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	bare, err := mc.New(srv.Endpoint[len("http://"):], &mc.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		Region: srv.Region, BucketLookup: mc.BucketLookupPath})
	if err != nil {
		b.Fatal(err)
	}
	return objstore.New(d, "minio://"+c.Bucket, objstore.Options{}), bare, c.Bucket
}

// BenchmarkPut256MiB uploads 256 MiB through the Store and the driver;
// BenchmarkBarePutObject256MiB with a bare minio-go PutObject of the same
// bytes and part size.
func BenchmarkPut256MiB(b *testing.B) {
	s, _, _ := benchSetup(b)
	data := benchData()
	b.SetBytes(benchObject)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Put(context.Background(), "bench/obj", bytes.NewReader(data), benchObject, objstore.PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBarePutObject256MiB(b *testing.B) {
	_, bare, bucket := benchSetup(b)
	data := benchData()
	b.SetBytes(benchObject)
	b.ResetTimer()
	for b.Loop() {
		if _, err := bare.PutObject(context.Background(), bucket, "bench/bare", bytes.NewReader(data), benchObject,
			mc.PutObjectOptions{PartSize: 16 << 20, NumThreads: 4}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet1MiB reads random 1 MiB ranges through the Store;
// BenchmarkBareGetObject1MiB with bare ranged minio-go gets.
func BenchmarkGet1MiB(b *testing.B) {
	s, _, _ := benchSetup(b)
	if _, err := s.Put(context.Background(), "bench/obj", bytes.NewReader(benchData()), benchObject, objstore.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.ReadAll(context.Background(), "bench/obj", r.Int64N(benchObject-1<<20), 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBareGetObject1MiB(b *testing.B) {
	s, bare, bucket := benchSetup(b)
	if _, err := s.Put(context.Background(), "bench/obj", bytes.NewReader(benchData()), benchObject, objstore.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for b.Loop() {
		off := r.Int64N(benchObject - 1<<20)
		var o mc.GetObjectOptions
		o.SetRange(off, off+1<<20-1)
		obj, err := bare.GetObject(context.Background(), bucket, "bench/obj", o)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, obj)
		obj.Close()
	}
}
