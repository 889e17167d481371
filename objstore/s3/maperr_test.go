package s3

import (
	"errors"
	"io"
	"net/http"
	"syscall"
	"testing"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tierlog/tierlog/objstore"
)

// TestMapErrKeepsTheCause: every mapping is found as its sentinel and as
// the SDK's error it came from.
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
		cause := &smithy.GenericAPIError{Code: code}
		err := mapErr(cause)
		var api smithy.APIError
		if !errors.Is(err, want) || !errors.As(err, &api) || api.ErrorCode() != code {
			t.Errorf("%s: %v", code, err)
		}
	}
	cause := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 503}}, Err: errors.New("unavailable")}
	if err := mapErr(cause); !errors.Is(err, objstore.ErrRetryable) || !errors.Is(err, cause) {
		t.Errorf("503: %v", err)
	}
	// If-Match on a missing key is a lost condition, not a not-found.
	err := putErr(&smithy.GenericAPIError{Code: "NoSuchKey"}, objstore.PutOptions{IfMatch: `"x"`})
	if !errors.Is(err, objstore.ErrPreconditionFailed) || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("If-Match on a missing key: %v", err)
	}
}

// TestMapErrNoResponse: a request whose connection was reset or closed
// before any response (status 0) is retryable.
func TestMapErrNoResponse(t *testing.T) {
	for _, cause := range []error{io.EOF, syscall.ECONNRESET, io.ErrUnexpectedEOF} {
		err := mapErr(&smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{}}, Err: &smithyhttp.RequestSendError{Err: cause}})
		if !errors.Is(err, objstore.ErrRetryable) || !errors.Is(err, cause) {
			t.Errorf("%v: %v", cause, err)
		}
	}
}
