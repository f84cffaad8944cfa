package unique

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// SignatureHeader is the header a signed kick carries:
// "t=<unix seconds>,v1=<hex of HMAC-SHA256(key, "<t>.<body>")>".
const SignatureHeader = "Unique-Signature"

// DefaultSignatureWindow is how far a signature's timestamp may be from the receiver's
// clock, either way.
const DefaultSignatureWindow = 5 * time.Minute

// MinKeyBytes is the shortest key accepted: SHA-256's output size.
const MinKeyBytes = 32

// maxSignatures is the most v1 entries tried; a header with more is malformed.
const maxSignatures = 8

// Why a kick's signature was refused (each answered 401). Authenticity is checked before
// freshness, so ErrSignatureStale and ErrSignatureFuture only describe genuine signatures.
var (
	ErrSignatureMissing   = errors.New("no unique-signature header")
	ErrSignatureMalformed = errors.New("malformed unique-signature header")
	ErrSignatureStale     = errors.New("signature timestamp is older than the window")
	ErrSignatureFuture    = errors.New("signature timestamp is ahead of the clock by more than the window")
	ErrSignatureBad       = errors.New("no signature matches the body under any key")
)

// keyIDLabel is what a key id is the HMAC of.
const keyIDLabel = "unique-kick-signature key id"

// SigningKeys holds one or more HMAC-SHA256 keys: Sign uses the first, Verify accepts a
// signature made with any of them, so a key rotates without a refused kick (give receivers
// the new key after the old one, make it first at the signer, then drop the old one).
type SigningKeys struct {
	keys [][]byte
}

// NewSigningKeys returns keys from bytes, the first one signing; each at least MinKeyBytes.
func NewSigningKeys(keys ...[]byte) (*SigningKeys, error) {
	if len(keys) == 0 {
		return nil, errors.New("no signing key given")
	}
	out := &SigningKeys{}
	for i, key := range keys {
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("signing key %d is shorter than %d bytes", i+1, MinKeyBytes)
		}
		out.keys = append(out.keys, append([]byte(nil), key...))
	}
	return out, nil
}

// ParseSigningKeys reads the key file format: one key per line (the line's bytes, trimmed of
// surrounding whitespace), the first one signing; blank lines and lines starting with '#'
// are skipped. Errors name the line, never the key.
func ParseSigningKeys(text string) (*SigningKeys, error) {
	out := &SigningKeys{}
	for i, line := range strings.Split(text, "\n") {
		key := strings.TrimSpace(line)
		if key == "" || strings.HasPrefix(key, "#") {
			continue
		}
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("signing key on line %d is shorter than %d bytes", i+1, MinKeyBytes)
		}
		out.keys = append(out.keys, []byte(key))
	}
	if len(out.keys) == 0 {
		return nil, errors.New("no signing key given")
	}
	return out, nil
}

// LoadSigningKeys reads the key file at path (the format of ParseSigningKeys, UTF-8): the
// same file the server's --kick-signing-keys names.
func LoadSigningKeys(path string) (*SigningKeys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read signing keys from %s: %w", path, err)
	}
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("cannot read signing keys from %s: not UTF-8", path)
	}
	return ParseSigningKeys(string(data))
}

// Len is how many keys there are.
func (k *SigningKeys) Len() int { return len(k.keys) }

// KeyIDs names every key, in order, without showing it: the first 8 bytes of
// HMAC-SHA256(key, "unique-kick-signature key id") in hex, as the server logs them.
func (k *SigningKeys) KeyIDs() []string {
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = hex.EncodeToString(tag(key, []byte(keyIDLabel))[:8])
	}
	return ids
}

// String never shows a key.
func (k *SigningKeys) String() string { return fmt.Sprintf("SigningKeys{count: %d}", len(k.keys)) }

// Sign returns the Unique-Signature value for body sent at now, under the first key. Sign
// the exact bytes sent: any change to them breaks the signature.
func (k *SigningKeys) Sign(body []byte, now time.Time) string {
	timestamp := strconv.FormatUint(unixSeconds(now), 10)
	return "t=" + timestamp + ",v1=" + hex.EncodeToString(tag(k.keys[0], signedMessage(timestamp, body)))
}

// Verify checks a Unique-Signature value (present false when the request had none) against
// the exact body: some v1 entry must be the HMAC of "<t>.<body>" under one of the keys
// (compared in constant time), and t within window of now either way, in whole seconds.
// Errors, in the order checked: ErrSignatureMissing, ErrSignatureMalformed,
// ErrSignatureBad, ErrSignatureStale, ErrSignatureFuture.
func (k *SigningKeys) Verify(header string, present bool, body []byte, now time.Time, window time.Duration) error {
	if !present {
		return ErrSignatureMissing
	}
	timestamp, seconds, tags, err := parseSignature(header)
	if err != nil {
		return err
	}
	message := signedMessage(timestamp, body)
	genuine := false
	for _, key := range k.keys {
		expected := tag(key, message)
		for _, t := range tags {
			if hmac.Equal(expected, t) {
				genuine = true
			}
		}
	}
	if !genuine {
		return ErrSignatureBad
	}
	nowSeconds, windowSeconds := unixSeconds(now), uint64(window/time.Second)
	low := uint64(0)
	if nowSeconds > windowSeconds {
		low = nowSeconds - windowSeconds
	}
	switch {
	case seconds < low:
		return ErrSignatureStale
	case seconds > nowSeconds && seconds-nowSeconds > windowSeconds:
		return ErrSignatureFuture
	}
	return nil
}

// parseSignature reads "t=<digits>,v1=<64 hex>[,v1=…]"; entries of another scheme are ignored.
func parseSignature(header string) (timestamp string, seconds uint64, tags [][]byte, err error) {
	// A value that is not visible ASCII (a tab allowed) is checked as "", which is malformed.
	for i := 0; i < len(header); i++ {
		if c := header[i]; c != '\t' && (c < 0x20 || c > 0x7e) {
			return "", 0, nil, ErrSignatureMalformed
		}
	}
	seen := false
	for _, entry := range strings.Split(header, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(entry), "=")
		if !ok {
			return "", 0, nil, ErrSignatureMalformed
		}
		switch name {
		case "t":
			if seen || value == "" || len(value) > 20 || strings.TrimLeft(value, "0123456789") != "" {
				return "", 0, nil, ErrSignatureMalformed
			}
			if seconds, err = strconv.ParseUint(value, 10, 64); err != nil {
				return "", 0, nil, ErrSignatureMalformed
			}
			timestamp, seen = value, true
		case "v1":
			if len(tags) == maxSignatures || len(value) != 2*sha256.Size {
				return "", 0, nil, ErrSignatureMalformed
			}
			decoded, err := hex.DecodeString(value)
			if err != nil {
				return "", 0, nil, ErrSignatureMalformed
			}
			tags = append(tags, decoded)
		}
	}
	if !seen || len(tags) == 0 {
		return "", 0, nil, ErrSignatureMalformed
	}
	return timestamp, seconds, tags, nil
}

func signedMessage(timestamp string, body []byte) []byte {
	message := make([]byte, 0, len(timestamp)+1+len(body))
	message = append(message, timestamp...)
	message = append(message, '.')
	return append(message, body...)
}

func tag(key, message []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write(message)
	return mac.Sum(nil)
}

func unixSeconds(t time.Time) uint64 {
	if s := t.Unix(); s > 0 {
		return uint64(s)
	}
	return 0
}
