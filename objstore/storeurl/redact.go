package storeurl

import (
	"errors"
	"net/url"
	"strings"
)

// hidden stands for a value Redact does not show (as url.URL.Redacted
// writes a password).
const hidden = "xxxxx"

// shownOptions are the query options whose values Redact shows: those
// Open knows that cannot hold a secret. Every other option's value is
// hidden, whatever its name, so that a secret put in the URL by mistake
// (secret_key=…, session_token=…) is never printed.
var shownOptions = map[string]bool{
	"region": true, "path-style": true, "profile": true, "sse": true, "kms-key": true, "insecure": true,
	"part-size": true, "concurrency": true, "timeout": true, "attempts": true, "create": true,
	"key-file": true, "chunk-size": true, "read-plaintext": true, "seal": true,
}

// Redact returns raw as it may be printed in an error, a log line or
// --json output: without the user info of the URL and of its endpoint
// option, without fragments, with the values of options that might hold
// a secret (any not in shownOptions) and the names of options that do not
// look like one (optionName) replaced by xxxxx, the endpoint shown as
// scheme://host[:port][/path]. An unparsable URL shows only its scheme.
// Every message of this package, and every Store it opens (its Name),
// names the URL through Redact.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return unparsable(raw)
	}
	r := *u
	r.User = nil
	r.Fragment, r.RawFragment = "", ""
	if r.Opaque != "" {
		r.Opaque = hidden
	}
	r.RawQuery = redactQuery(u.RawQuery, func(k, v string) string {
		switch {
		case k == "endpoint":
			return redactEndpoint(v)
		case shownOptions[k]:
			return v
		}
		return hidden
	})
	r.ForceQuery = false
	return r.String()
}

// unparsable names a URL that url.Parse refused by its scheme alone.
func unparsable(raw string) string {
	if scheme, _, ok := strings.Cut(raw, "://"); ok && optionName(scheme) {
		return scheme + "://(unparsable URL)"
	}
	return "(unparsable URL)"
}

// redactEndpoint shows an endpoint URL without user info, query or
// fragment.
func redactEndpoint(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return unparsable(raw)
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return r.String()
}

// redactQuery rewrites a raw query pair by pair, in order: names that do
// not look like an option's are hidden, values are what value returns;
// a pair that does not unescape, or holds a ';', is hidden whole. Values are escaped only
// where they must be, so that an endpoint still reads http://host:port.
func redactQuery(rawQuery string, value func(k, v string) string) string {
	var b strings.Builder
	for pair := range strings.SplitSeq(rawQuery, "&") {
		if pair == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		k, v, _ := strings.Cut(pair, "=")
		k, kerr := url.QueryUnescape(k)
		v, verr := url.QueryUnescape(v)
		if kerr != nil || verr != nil || !optionName(k) || strings.Contains(pair, ";") {
			b.WriteString(hidden + "=" + hidden)
			continue
		}
		b.WriteString(k + "=" + queryEscape(value(k, v)))
	}
	return b.String()
}

var unescapeURLChars = strings.NewReplacer("%3A", ":", "%2F", "/")

func queryEscape(s string) string { return unescapeURLChars.Replace(url.QueryEscape(s)) }

// optionName reports whether s looks like an option's (or a scheme's)
// name, lower case letters, digits, '-', '_' and '.', at most 32 bytes, and
// so may be printed: a secret put in the URL as a bare word is not.
func optionName(s string) bool {
	if s == "" || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '+') {
			return false
		}
	}
	return true
}

// parseCause says what url.Parse found wrong without quoting the URL, or
// any part of it: its error quotes the whole URL, and the part it names
// (a port, an escape) may be a piece of a password.
func parseCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ee url.EscapeError
	var he url.InvalidHostError
	switch {
	case errors.As(err, &ee):
		return "a % not followed by two hex digits (write a % as %25)"
	case errors.As(err, &he):
		return "a character not allowed in a host name"
	}
	msg := strings.TrimPrefix(err.Error(), "net/url: ")
	if i := strings.IndexAny(msg, "\"'`"); i >= 0 {
		msg = strings.TrimSpace(msg[:i])
	}
	return msg
}
