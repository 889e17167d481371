package s3

import (
	"context"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/storeurl"
)

// Importing this package makes storeurl open s3:// URLs:
//
//	s3://bucket/prefix?region=eu-west-1
//	s3://bucket/prefix?endpoint=http://127.0.0.1:9000&path-style=true
func init() {
	storeurl.Register("s3", storeurl.Opener{
		Options: []string{"endpoint", "region", "path-style", "profile", "sse", "kms-key", "insecure", "part-size", "concurrency"},
		Open:    openURL,
	})
}

// openURL builds the driver for an s3:// URL. Reading the AWS
// configuration touches no network; it is held to the store's bound all
// the same.
func openURL(ctx context.Context, u *storeurl.URL, opts objstore.Options) (objstore.Driver, error) {
	if u.Bucket == "" {
		return nil, u.Errorf("no bucket: s3://bucket/prefix")
	}
	pathStyle, err := u.Bool("path-style")
	if err != nil {
		return nil, err
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
	ctx, cancel := context.WithTimeout(ctx, opts.Bound())
	defer cancel()
	d, err := New(ctx, Config{Bucket: u.Bucket, Prefix: u.Prefix, Endpoint: u.Option("endpoint"),
		Region: u.Option("region"), PathStyle: pathStyle, Profile: u.Option("profile"), InsecureSkipVerify: insecure,
		SSE: u.Option("sse"), KMSKeyID: u.Option("kms-key"), PartSize: partSize, Concurrency: int(conc)})
	if err != nil {
		return nil, err
	}
	return d, nil
}
