package storeurl_test

import (
	"os"
	"testing"

	// The network schemes the tests open.
	_ "github.com/tierlog/tierlog/objstore/minio"
	_ "github.com/tierlog/tierlog/objstore/s3"
	"github.com/tierlog/tierlog/testing/s3server"
)

func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
