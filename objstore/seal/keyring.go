package seal

import (
	"bufio"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// KeyRing holds the key-encryption keys (KEKs) that wrap bucket keys. A
// broker may back it with a KMS (Wrap and Unwrap each a KMS call; the
// Driver calls them once per bucket key, not per object). Implementations
// MUST be safe for concurrent use.
type KeyRing interface {
	// Active is the id of the KEK new bucket keys are wrapped under, and
	// the one Rekey re-wraps under.
	Active() string
	// Wrap seals key under the KEK id; context is bound into the
	// wrapping so it opens only with the same context.
	Wrap(ctx context.Context, id string, key, context []byte) ([]byte, error)
	// Unwrap opens what Wrap returned. An id the ring does not hold MUST
	// be an error wrapping ErrUnknownKey; a wrapping that does not open
	// under that id (another key under the same name, changed bytes,
	// another context) ErrWrongKey. A failure that may pass (a KMS
	// unreachable, throttling) SHOULD wrap objstore.ErrRetryable, so the
	// Store retries the request that needed the key.
	Unwrap(ctx context.Context, id string, wrapped, context []byte) ([]byte, error)
}

// KeyFile is a KeyRing read from a local file:
//
//	# tierlog key file: chmod 600
//	key 2026-12 oK3nTq0v...   (base64 of 32 random bytes)
//	key 2027-06 1xQe7mB0...
//	active 2027-06
//
// Lines are "key ID BASE64" (AES-256 KEKs: 32 bytes each; the id is 1 to
// 32 of A-Z a-z 0-9 . _ -) and one "active ID" naming one of them; blank
// lines and lines starting with # are ignored. A KEK wraps with AES-256-GCM
// under a random nonce, the id and the context bound as associated data.
// Keys no longer active stay in the file for as long as something is
// wrapped under them: `tierctl rekey` says when none is. NewKey makes a
// key line.
type KeyFile struct {
	path   string
	active string
	keys   map[string]cipher.AEAD
}

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,32}$`)

// shownID is id as an error may show it: a key id, or, when it is not
// one (it may be a key pasted in the wrong place: a key's base64 is 44
// characters, longer than any id), not shown.
func shownID(id string) string {
	if keyIDPattern.MatchString(id) {
		return strconv.Quote(id)
	}
	return "(not a key id, not shown)"
}

// LoadKeyFile reads path. The file must not be readable by group or
// others, as ssh insists of a private key: a key file that is gets an
// error saying so.
func LoadKeyFile(path string) (*KeyFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seal: key file: %w", err)
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s: mode %04o lets group or others at the keys; chmod 600 %s", ErrBadKeyFile, path, m, path)
	}
	return parseKeyFile(path, io.LimitReader(f, 1<<20))
}

// ParseKeyFile reads a key file's text from r; name is for errors.
func ParseKeyFile(name string, r io.Reader) (*KeyFile, error) { return parseKeyFile(name, r) }

func parseKeyFile(name string, r io.Reader) (*KeyFile, error) {
	kf := &KeyFile{path: name, keys: map[string]cipher.AEAD{}}
	sc := bufio.NewScanner(r)
	line := 0
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s line %d: %s", ErrBadKeyFile, name, line, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch {
		case f[0] == "key" && len(f) == 3:
			if !keyIDPattern.MatchString(f[1]) {
				return nil, bad("key id %s: want 1 to 32 of A-Z a-z 0-9 . _ -", shownID(f[1]))
			}
			if _, dup := kf.keys[f[1]]; dup {
				return nil, bad("key %s given twice", shownID(f[1]))
			}
			raw, err := base64.StdEncoding.DecodeString(f[2])
			if err != nil || len(raw) != 32 {
				// The key's bytes are never quoted.
				return nil, bad("key %s: want the base64 of 32 bytes (tierctl key new makes a line)", shownID(f[1]))
			}
			block, _ := aes.NewCipher(raw)
			aead, _ := cipher.NewGCM(block)
			kf.keys[f[1]] = aead
		case f[0] == "active" && len(f) == 2:
			if kf.active != "" {
				return nil, bad("a second active line")
			}
			kf.active = f[1]
		default:
			return nil, bad("want \"key ID BASE64\" or \"active ID\"")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadKeyFile, name, err)
	}
	line = 0
	switch {
	case len(kf.keys) == 0:
		return nil, fmt.Errorf("%w: %s: no keys", ErrBadKeyFile, name)
	case kf.active == "":
		return nil, fmt.Errorf("%w: %s: no \"active ID\" line", ErrBadKeyFile, name)
	case kf.keys[kf.active] == nil:
		return nil, fmt.Errorf("%w: %s: the active key %s is not in the file", ErrBadKeyFile, name, shownID(kf.active))
	}
	return kf, nil
}

// NewKey returns a key file line holding a new random KEK with id.
func NewKey(id string) (string, error) {
	if !keyIDPattern.MatchString(id) {
		return "", fmt.Errorf("%w: key id %s: want 1 to 32 of A-Z a-z 0-9 . _ -", ErrBadKeyID, shownID(id))
	}
	var k [32]byte
	rand.Read(k[:])
	return "key " + id + " " + base64.StdEncoding.EncodeToString(k[:]), nil
}

// Active implements KeyRing.
func (kf *KeyFile) Active() string { return kf.active }

// IDs lists the file's key ids, sorted.
func (kf *KeyFile) IDs() []string {
	var ids []string
	for id := range kf.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func wrapAD(id string, context []byte) []byte {
	return append([]byte("tierlog kek "+id+"\x00"), context...)
}

// Wrap implements KeyRing.
func (kf *KeyFile) Wrap(_ context.Context, id string, key, context []byte) ([]byte, error) {
	aead := kf.keys[id]
	if aead == nil {
		return nil, &KeyError{ID: id, Err: ErrUnknownKey}
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(key)+aead.Overhead())
	rand.Read(nonce)
	return aead.Seal(nonce, nonce, key, wrapAD(id, context)), nil
}

// Unwrap implements KeyRing.
func (kf *KeyFile) Unwrap(_ context.Context, id string, wrapped, context []byte) ([]byte, error) {
	aead := kf.keys[id]
	if aead == nil {
		return nil, &KeyError{ID: id, Err: ErrUnknownKey}
	}
	n := aead.NonceSize()
	if len(wrapped) < n+aead.Overhead() {
		return nil, &KeyError{ID: id, Err: ErrWrongKey}
	}
	key, err := aead.Open(nil, wrapped[:n], wrapped[n:], wrapAD(id, context))
	if err != nil {
		return nil, &KeyError{ID: id, Err: ErrWrongKey}
	}
	return key, nil
}
