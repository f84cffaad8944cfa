package unique

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shared vector (docs/kick-signature-vector.json), which the Rust tests check too.
func TestSignatureVector(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "kick-signature-vector.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vector struct {
		Key       string `json:"key"`
		Timestamp int64  `json:"timestamp"`
		Body      string `json:"body"`
		Header    string `json:"header"`
		KeyID     string `json:"key_id"`
	}
	if err := json.Unmarshal(data, &vector); err != nil {
		t.Fatal(err)
	}
	keys, err := NewSigningKeys([]byte(vector.Key))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(vector.Timestamp, 0)
	if got := keys.Sign([]byte(vector.Body), at); got != vector.Header {
		t.Fatalf("signed %q, want %q", got, vector.Header)
	}
	if err := keys.Verify(vector.Header, true, []byte(vector.Body), at, DefaultSignatureWindow); err != nil {
		t.Fatal(err)
	}
	if ids := keys.KeyIDs(); ids[0] != vector.KeyID {
		t.Fatalf("key id %s, want %s", ids[0], vector.KeyID)
	}
}

func TestSignatureRejections(t *testing.T) {
	const now = 1_700_000_000
	oldKey := "old-key-0123456789abcdef0123456789abcdef"
	newKey := "new-key-0123456789abcdef0123456789abcdef"
	body := []byte(`{"project":"game","env":"prod","uid":42,"gen":7}`)
	keys := func(k ...string) *SigningKeys {
		var raw [][]byte
		for _, key := range k {
			raw = append(raw, []byte(key))
		}
		out, err := NewSigningKeys(raw...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	signed := func(signer *SigningKeys, at int64) string { return signer.Sign(body, time.Unix(at, 0)) }
	good := signed(keys(newKey), now)
	goodTag := strings.SplitN(good, ",", 2)[1]
	cases := []struct {
		name     string
		receiver *SigningKeys
		header   string
		present  bool
		body     []byte
		want     error
	}{
		{"signed", keys(newKey), good, true, body, nil},
		{"missing", keys(newKey), "", false, body, ErrSignatureMissing},
		{"empty", keys(newKey), "", true, body, ErrSignatureMalformed},
		{"no v1", keys(newKey), "t=1", true, body, ErrSignatureMalformed},
		{"t twice", keys(newKey), "t=1,t=2," + goodTag, true, body, ErrSignatureMalformed},
		{"signed t", keys(newKey), "t=+1," + goodTag, true, body, ErrSignatureMalformed},
		{"short tag", keys(newKey), good[:len(good)-2], true, body, ErrSignatureMalformed},
		{"nine v1", keys(newKey), "t=1" + strings.Repeat(","+goodTag, 9), true, body, ErrSignatureMalformed},
		{"other schemes ignored", keys(newKey), "v0=x, " + good + " ,v2=later", true, body, nil},
		{"wrong key", keys(newKey), signed(keys(oldKey), now), true, body, ErrSignatureBad},
		{"changed body", keys(newKey), good, true, append(append([]byte{}, body...), ' '), ErrSignatureBad},
		{"padded timestamp", keys(newKey), strings.Replace(good, "t=", "t=0", 1), true, body, ErrSignatureBad},
		{"stale", keys(newKey), signed(keys(newKey), now-301), true, body, ErrSignatureStale},
		{"window edge, old", keys(newKey), signed(keys(newKey), now-300), true, body, nil},
		{"window edge, new", keys(newKey), signed(keys(newKey), now+300), true, body, nil},
		{"future", keys(newKey), signed(keys(newKey), now+301), true, body, ErrSignatureFuture},
		{"forged and stale is forged", keys(newKey), signed(keys(oldKey), now-3600), true, body, ErrSignatureBad},
		{"rotation: receiver holds both", keys(newKey, oldKey), signed(keys(oldKey), now), true, body, nil},
		{"rotation: signer signs with the first", keys(newKey), signed(keys(newKey, oldKey), now), true, body, nil},
		{"rotation: old key dropped", keys(oldKey), signed(keys(newKey, oldKey), now), true, body, ErrSignatureBad},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.receiver.Verify(c.header, c.present, c.body, time.Unix(now, 0), DefaultSignatureWindow)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("%v, want %v", err, c.want)
			}
		})
	}
}

func TestKeyFiles(t *testing.T) {
	keys, err := ParseSigningKeys("# signing key\n\n  new-key-0123456789abcdef0123456789abcdef  \r\n# old\nold-key-0123456789abcdef0123456789abcdef\n")
	if err != nil || keys.Len() != 2 {
		t.Fatalf("%v %v", keys, err)
	}
	if _, err := ParseSigningKeys("# c\nnew-key-0123456789abcdef0123456789abcdef\n\nshort-secret\n"); err == nil ||
		err.Error() != "signing key on line 4 is shorter than 32 bytes" || strings.Contains(err.Error(), "short-secret") {
		t.Fatalf("short key: %v", err)
	}
	if _, err := ParseSigningKeys("# nothing\n"); err == nil {
		t.Fatal("no key accepted")
	}
	if _, err := LoadSigningKeys(filepath.Join(t.TempDir(), "missing.keys")); err == nil ||
		!strings.HasPrefix(err.Error(), "cannot read signing keys from ") {
		t.Fatalf("missing file: %v", err)
	}
}
