package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/tierlog/tierlog/objstore"
)

var (
	// ErrNoDriver: the URL's scheme has a tierlog driver and the program
	// does not import it. Open returns it as a *MissingDriverError, which
	// names the import.
	ErrNoDriver = errors.New("storeurl: the scheme's driver is not in this program")
)

// MissingDriverError is Open's error for a URL whose scheme's driver
// package is not imported: the program needs the blank import it names.
type MissingDriverError struct {
	Scheme string // "s3"
	Import string // "github.com/tierlog/tierlog/objstore/s3"
}

func (e *MissingDriverError) Error() string {
	return fmt.Sprintf("storeurl: no driver for %s:// URLs in this program: import _ %q", e.Scheme, e.Import)
}

// Unwrap returns ErrNoDriver.
func (e *MissingDriverError) Unwrap() error { return ErrNoDriver }

// driverImports names the package that registers each of tierlog's
// network drivers.
var driverImports = map[string]string{
	"s3":    "github.com/tierlog/tierlog/objstore/s3",
	"minio": "github.com/tierlog/tierlog/objstore/minio",
}

// builtin lists the query options of the schemes storeurl opens itself.
var builtin = map[string][]string{
	"file": {"create"},
	"mem":  {},
}

// commonOptions are the options of every registered scheme, which Open
// applies to objstore.Options.
var commonOptions = []string{"timeout", "attempts"}

// An Opener opens the stores of one URL scheme. A driver package
// registers its Opener in an init function, so that importing the package
// is what makes its scheme work, as database/sql drivers do:
//
//	import _ "github.com/tierlog/tierlog/objstore/s3"
type Opener struct {
	// Options lists the query options the scheme takes, besides timeout
	// and attempts; Open refuses any other. An option named endpoint
	// is checked by Open (a plain http(s) URL without credentials).
	// Redact shows only the values of options it knows to be harmless.
	Options []string
	// Open builds the driver for u. It MUST NOT touch the network for
	// longer than opts.Bound(); Open checks the bucket itself afterwards
	// (objstore.Store.CheckBucket) when the driver is a BucketChecker.
	// Its errors MUST NOT quote u but through u.String(); Open prefixes
	// them with the URL, redacted.
	Open func(ctx context.Context, u *URL, opts objstore.Options) (objstore.Driver, error)
}

var (
	regMu   sync.RWMutex
	openers = map[string]Opener{}
)

// Register makes Open use o for scheme's URLs. It panics, as
// database/sql.Register does, when scheme is registered twice, is file or
// mem, or o has no Open: each is a mistake of the program, not of its
// input.
func Register(scheme string, o Opener) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, ok := builtin[scheme]; ok || scheme == "" || o.Open == nil {
		panic(fmt.Sprintf("storeurl: Register %q: not a scheme a driver may register", scheme))
	}
	if _, ok := openers[scheme]; ok {
		panic(fmt.Sprintf("storeurl: Register %q twice", scheme))
	}
	o.Options = append(slices.Clone(o.Options), commonOptions...)
	openers[scheme] = o
}

// lookup returns scheme's query options and, for a registered scheme, its
// Opener; an unknown scheme or a missing driver is an error naming raw.
func lookup(raw, scheme string) ([]string, *Opener, error) {
	if names, ok := builtin[scheme]; ok {
		return names, nil, nil
	}
	regMu.RLock()
	o, ok := openers[scheme]
	regMu.RUnlock()
	switch {
	case ok:
		return o.Options, &o, nil
	case driverImports[scheme] != "":
		return nil, nil, fmt.Errorf("%s: %w", Redact(raw), &MissingDriverError{scheme, driverImports[scheme]})
	}
	return nil, nil, bad(raw, "unknown scheme %q (want %s)", scheme, schemes())
}

// schemes lists every scheme Open knows, registered or not.
func schemes() string {
	regMu.RLock()
	defer regMu.RUnlock()
	var all []string
	for s := range builtin {
		all = append(all, s)
	}
	for s := range driverImports {
		all = append(all, s)
	}
	for s := range openers {
		if driverImports[s] == "" {
			all = append(all, s)
		}
	}
	sort.Strings(all)
	return fmt.Sprint(all)
}

// URL is a store URL as an Opener sees it: parsed, its options checked
// against the scheme's.
type URL struct {
	Scheme string
	// Bucket is the URL's host.
	Bucket string
	// Prefix is its path without leading or trailing '/'.
	Prefix string
	path   string // the path as it is (file://)
	query  url.Values
	raw    string
}

// Option returns the value of a query option ("" when not given).
func (u *URL) Option(name string) string { return u.query.Get(name) }

// Bool returns a true/false option: absent is false, given without a
// value (?insecure) true.
func (u *URL) Bool(name string) (bool, error) {
	v, ok := u.query[name]
	if !ok {
		return false, nil
	}
	if len(v) == 0 || v[0] == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil {
		return false, u.Errorf("option %s=%q: want true or false", name, v[0])
	}
	return b, nil
}

// Positive returns a whole-number option, 0 when not given.
func (u *URL) Positive(name string) (int64, error) {
	v := u.query.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, u.Errorf("option %s=%q: want a positive number", name, v)
	}
	return n, nil
}

// Errorf returns an error wrapping objstore.ErrInvalidURL; Open names the
// URL in front of it.
func (u *URL) Errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", objstore.ErrInvalidURL, fmt.Sprintf(format, args...))
}

// String returns the URL through Redact.
func (u *URL) String() string { return Redact(u.raw) }
