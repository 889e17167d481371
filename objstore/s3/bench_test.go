package s3_test

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/s3"
)

const benchObject = 256 << 20

func benchData() []byte {
	b := make([]byte, benchObject)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// BenchmarkPut256MiB uploads 256 MiB through the Store and the driver
// (16 MiB parts, 4 in flight); BenchmarkBarePutObject256MiB sends the same
// bytes with one bare SDK PutObject. The ratio is the driver's overhead
// (target >= 0.9).
func BenchmarkPut256MiB(b *testing.B) {
	s := newStoreB(b, 16<<20)
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
	s := newStoreB(b, 16<<20)
	c := s.Driver().(*s3.Driver).Client()
	data := benchData()
	b.SetBytes(benchObject)
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.PutObject(context.Background(), &awss3.PutObjectInput{Bucket: aws.String(bucketOf(s)), Key: aws.String("bench/bare"),
			Body: bytes.NewReader(data), ContentLength: aws.Int64(benchObject)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet1MiB reads random 1 MiB ranges of a 256 MiB object through
// the Store; BenchmarkBareGetObject1MiB does the same with bare ranged
// GetObject calls.
func BenchmarkGet1MiB(b *testing.B) {
	s := newStoreB(b, 16<<20)
	data := benchData()
	if _, err := s.Put(context.Background(), "bench/obj", bytes.NewReader(data), benchObject, objstore.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for b.Loop() {
		off := r.Int64N(benchObject - 1<<20)
		if _, err := s.ReadAll(context.Background(), "bench/obj", off, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBareGetObject1MiB(b *testing.B) {
	s := newStoreB(b, 16<<20)
	data := benchData()
	if _, err := s.Put(context.Background(), "bench/obj", bytes.NewReader(data), benchObject, objstore.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	c := s.Driver().(*s3.Driver).Client()
	r := rand.New(rand.NewPCG(3, 4))
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for b.Loop() {
		off := r.Int64N(benchObject - 1<<20)
		out, err := c.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(bucketOf(s)), Key: aws.String("bench/obj"),
			Range: aws.String("bytes=" + itoa(off) + "-" + itoa(off+1<<20-1))})
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, out.Body)
		out.Body.Close()
	}
}
