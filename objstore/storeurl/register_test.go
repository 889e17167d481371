package storeurl

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/tierlog/tierlog/objstore"
)

// TestMissingDriverNamesTheImport: in a program that does not import a
// scheme's driver, Open says which import it needs, and errors.Is finds
// ErrNoDriver. (This test binary imports both drivers, through the S3
// test server; the test takes s3's registration away while it runs.)
func TestMissingDriverNamesTheImport(t *testing.T) {
	regMu.Lock()
	saved, ok := openers["s3"]
	delete(openers, "s3")
	regMu.Unlock()
	t.Cleanup(func() {
		if ok {
			regMu.Lock()
			openers["s3"] = saved
			regMu.Unlock()
		}
	})
	_, err := Open(context.Background(), "s3://bucket/p?endpoint=http://127.0.0.1:1&region=eu-west-1", objstore.Options{})
	var mde *MissingDriverError
	if !errors.Is(err, ErrNoDriver) || !errors.As(err, &mde) || mde.Scheme != "s3" || mde.Import != "github.com/tierlog/tierlog/objstore/s3" {
		t.Fatalf("s3:// without its driver: %v", err)
	}
	if !strings.Contains(err.Error(), `import _ "github.com/tierlog/tierlog/objstore/s3"`) || !strings.Contains(err.Error(), "s3://bucket/p") {
		t.Errorf("the error does not name the import and the URL: %v", err)
	}
	if _, err := Open(context.Background(), "gopher://x", objstore.Options{}); !errors.Is(err, objstore.ErrInvalidURL) || !strings.Contains(err.Error(), "minio") {
		t.Errorf("an unknown scheme: %v, want ErrInvalidURL listing the schemes", err)
	}
}

// TestRegisterRefusesMistakes: registering a scheme twice, a built-in one
// or one without Open is a mistake of the program, which Register panics
// on.
func TestRegisterRefusesMistakes(t *testing.T) {
	open := func(context.Context, *URL, objstore.Options) (objstore.Driver, error) { return nil, nil }
	for _, c := range []struct {
		scheme string
		o      Opener
	}{{"minio", Opener{Open: open}}, {"file", Opener{Open: open}}, {"", Opener{Open: open}}, {"zz-test", Opener{}}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", c.scheme)
				}
			}()
			Register(c.scheme, c.o)
		}()
	}
}

// TestNoSDKWithoutItsImport: storeurl itself links neither the AWS SDK
// nor minio-go, so a program that opens only file:// URLs carries
// neither.
func TestNoSDKWithoutItsImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for dep := range strings.Lines(string(out)) {
		if strings.Contains(dep, "github.com/aws/") || strings.Contains(dep, "github.com/minio/") ||
			strings.Contains(dep, "tierlog/objstore/s3") || strings.Contains(dep, "tierlog/objstore/minio") {
			t.Errorf("storeurl depends on %s", strings.TrimSpace(dep))
		}
	}
}
