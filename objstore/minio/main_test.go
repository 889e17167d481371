package minio_test

import (
	"os"
	"testing"

	"github.com/tierlog/tierlog/testing/s3server"
)

func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
