package minio

import (
	"context"
	"os"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
)

// Importing this package makes storeurl open minio:// URLs:
//
//	minio://bucket/prefix?endpoint=http://127.0.0.1:9000
//
// The credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
// else MinIO's environment and the AWS credentials file.
func init() {
	storeurl.Register("minio", storeurl.Opener{
		Options: []string{"endpoint", "region", "sse", "insecure", "part-size", "concurrency"},
		Open:    openURL,
	})
}

// openURL builds the driver for a minio:// URL, without the network.
func openURL(_ context.Context, u *storeurl.URL, _ objstore.Options) (objstore.Driver, error) {
	if u.Bucket == "" || u.Option("endpoint") == "" {
		return nil, u.Errorf("want minio://bucket/prefix?endpoint=http://host:port")
	}
	insecure, err := u.Bool("insecure")
	if err != nil {
		return nil, err
	}
	partSize, err := u.Positive("part-size")
	if err != nil {
		return nil, err
	}
	conc, err := u.Positive("concurrency")
	if err != nil {
		return nil, err
	}
	d, err := New(Config{Bucket: u.Bucket, Prefix: u.Prefix, Endpoint: u.Option("endpoint"),
		Region: u.Option("region"), AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		InsecureSkipVerify: insecure, SSE: u.Option("sse"), PartSize: uint64(partSize), Concurrency: uint(conc)})
	if err != nil {
		return nil, err
	}
	return d, nil
}
