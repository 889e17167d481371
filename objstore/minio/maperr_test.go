package minio

import (
	"errors"
	"net/http"
	"testing"

	mc "github.com/minio/minio-go/v7"

	"github.com/tierlog/tierlog/objstore"
)

// TestMapErrKeepsTheCause: every mapping is found as its sentinel and as
// minio-go's error it came from.
func TestMapErrKeepsTheCause(t *testing.T) {
	for code, want := range map[string]error{
		"NoSuchKey": objstore.ErrNotFound, "NoSuchBucket": objstore.ErrBucketNotFound,
		"PreconditionFailed": objstore.ErrPreconditionFailed, "AccessDenied": objstore.ErrAccessDenied,
		"BadDigest": objstore.ErrChecksumMismatch, "InvalidRange": objstore.ErrInvalidRange, "SlowDown": objstore.ErrRetryable,
		// MinIO short of read or write quorum (a node down), also as the
		// per-key errors of a batch delete, which carry no HTTP status.
		"SlowDownRead": objstore.ErrRetryable, "SlowDownWrite": objstore.ErrRetryable,
		"XMinioServerNotInitialized": objstore.ErrRetryable,
	} {
		err := mapErr(mc.ErrorResponse{Code: code})
		var r mc.ErrorResponse
		if !errors.Is(err, want) || !errors.As(err, &r) || r.Code != code {
			t.Errorf("%s: %v", code, err)
		}
	}
	if err := mapErr(mc.ErrorResponse{StatusCode: http.StatusServiceUnavailable}); !errors.Is(err, objstore.ErrRetryable) {
		t.Errorf("503: %v", err)
	}
}
