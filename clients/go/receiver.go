package unique

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKickBodyBytes is the largest kick body a receiver takes (4 KiB); a kick is well under
// 600 bytes.
const MaxKickBodyBytes = 4096

// maxCauseBytes is the most bytes of a kick's message (and of an unknown reason's name) a
// node keeps: the server's 256-character limit on an admin's reason at 4 bytes each.
const maxCauseBytes = 4 * 256

// maxTenantChars is the default limit on a project, env or slot, in characters.
const maxTenantChars = 64

// The kick reasons the server sends.
const (
	// ReasonLoginElsewhere: a newer login took the key (also a kick naming no reason).
	ReasonLoginElsewhere = "login-elsewhere"
	// ReasonAdmin: an operator logged the user out; the kick's message is theirs.
	ReasonAdmin = "admin"
)

// Kick is a kick's payload: the key whose session must yield, the gen it yields to, and why.
type Kick struct {
	Key
	// Gen is the gen the node yields to: only a local session with an older gen ends (I6).
	Gen int64
	// Reason is why it was sent: ReasonLoginElsewhere, ReasonAdmin, or a name this client
	// does not know (kept, at most 1 KiB).
	Reason string
	// Message is the text for the user (an admin's reason), "" when none; at most 1 KiB.
	Message string
}

// KickAck is what a kick came to.
type KickAck string

// The acks: the first three are answered 200 (no session older than the kick remains here).
const (
	AckDestroyed KickAck = "destroyed"
	AckNoSession KickAck = "no-session"
	AckNotOlder  KickAck = "not-older"
	AckTimedOut  KickAck = "timed-out"
	AckFailed    KickAck = "failed"
)

// KickTarget applies kicks: a *Node is one.
type KickTarget interface {
	HandleKick(Kick) KickAck
}

// ReceiverOptions configures a KickReceiver.
type ReceiverOptions struct {
	// Keys verifies every kick's Unique-Signature (any key); nil accepts unsigned kicks,
	// which CheckExposure then allows on loopback only.
	Keys *SigningKeys
	// Window is the signature window (DefaultSignatureWindow when 0).
	Window time.Duration
	// InsecureUnsigned declares that every host that can reach the receiver is trusted:
	// CheckExposure then allows unsigned kicks on any address.
	InsecureUnsigned bool
	// Now is the clock signatures are judged by (time.Now when nil; tests move it).
	Now func() time.Time
}

// KickReceiver is the kick receiver as an http.Handler: mount it at the path of the node's
// owner endpoint. Answers (docs/design.md, "Kick receiver"): 200 {"ack": ...} once no
// session older than the kick remains here; 401 unauthenticated for a missing, malformed,
// forged or out-of-window signature (checked before the body is read as a kick, nothing
// destroyed); 400 invalid_params for a malformed or incomplete payload or an invalid key
// (unknown fields are ignored); 405 with "Allow: POST" for another method; 413 too_large for a
// body over 4 KiB, by Content-Length or while reading; 503 unavailable when the session's
// ending did not finish.
type KickReceiver struct {
	target  KickTarget
	options ReceiverOptions
}

// NewKickReceiver returns a receiver applying kicks to target.
func NewKickReceiver(target KickTarget, options ReceiverOptions) *KickReceiver {
	if options.Window == 0 {
		options.Window = DefaultSignatureWindow
	}
	if options.Now == nil {
		options.Now = time.Now
	}
	return &KickReceiver{target: target, options: options}
}

// CheckExposure says whether the receiver may listen on addr: yes when it verifies
// signatures, when addr is loopback (0.0.0.0 and :: are not), or with InsecureUnsigned.
// Otherwise any host that reaches it could log this node's users out.
func (r *KickReceiver) CheckExposure(addr net.Addr) error {
	if r.options.Keys != nil || r.options.InsecureUnsigned {
		return nil
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to serve unsigned kicks on %v: any host that reaches it could log "+
		"this node's users out; give the receiver the arbiter's signing keys (ReceiverOptions.Keys), "+
		"or set InsecureUnsigned if every host that can reach it is trusted", addr)
}

// ServeHTTP answers one kick request.
func (r *KickReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, "method_not_allowed", "kicks are POST requests")
		return
	}
	tooLarge := fmt.Sprintf("kick body over %d bytes", MaxKickBodyBytes)
	if req.ContentLength > MaxKickBodyBytes {
		reply(w, http.StatusRequestEntityTooLarge, "too_large", tooLarge)
		return
	}
	// Enforced while reading too: a chunked body declares no length.
	body, err := io.ReadAll(io.LimitReader(req.Body, MaxKickBodyBytes+1))
	if err != nil {
		reply(w, http.StatusBadRequest, "invalid_params", "request body could not be read")
		return
	}
	values := req.Header.Values(SignatureHeader)
	header := ""
	if len(values) > 0 {
		header = values[0]
	}
	verdict := r.decide(body, header, len(values) > 0)
	if verdict.status != http.StatusOK {
		reply(w, verdict.status, verdict.code, verdict.message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, `{"ack":%q}`, string(verdict.ack))
}

// verdict is what a receiver answers one kick: the status, and the ack (200) or the error's
// code and message.
type verdict struct {
	status  int
	ack     KickAck
	code    string
	message string
}

// decide checks one kick body and its signature header (present says whether the request
// carried one) and applies it: the answer of ServeHTTP after the method and the declared
// length, and the status a push node acks a pushed kick with (push.go).
func (r *KickReceiver) decide(body []byte, header string, present bool) verdict {
	if len(body) > MaxKickBodyBytes {
		return verdict{status: http.StatusRequestEntityTooLarge, code: "too_large",
			message: fmt.Sprintf("kick body over %d bytes", MaxKickBodyBytes)}
	}
	if keys := r.options.Keys; keys != nil {
		if err := keys.Verify(header, present, body, r.options.Now(), r.options.Window); err != nil {
			return verdict{status: http.StatusUnauthorized, code: "unauthenticated", message: err.Error()}
		}
	}
	kick, err := DecodeKick(body)
	if err != nil {
		return verdict{status: http.StatusBadRequest, code: "invalid_params", message: err.Error()}
	}
	switch ack := r.target.HandleKick(kick); ack {
	case AckDestroyed, AckNoSession, AckNotOlder:
		return verdict{status: http.StatusOK, ack: ack}
	case AckTimedOut:
		return verdict{status: http.StatusServiceUnavailable, ack: ack, code: "unavailable", message: "destroy timed out"}
	default:
		return verdict{status: http.StatusServiceUnavailable, ack: ack, code: "unavailable", message: "destroy failed"}
	}
}

func reply(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	encoder := json.NewEncoder(w)
	encoder.SetEscapeHTML(false) // "uid must be >= 1" reads as written
	_ = encoder.Encode(map[string]string{"error": code, "message": message})
}

// DecodeKick reads a kick payload as the Rust receiver does: project, env, uid and gen are
// required (uid and gen integers), slot is a string when present ("" is the default slot);
// a missing or null reason reads as ReasonLoginElsewhere and one that is not a string as "";
// a message that is not a string as none; any other field is ignored. The key is validated
// (project and env 1-64 characters without '#' or control characters, uid >= 1; a slot
// likewise, or a pool's place "#0" to "#999").
func DecodeKick(body []byte) (Kick, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return Kick{}, fmt.Errorf("malformed kick: %v", err)
	}
	if fields == nil {
		return Kick{}, errors.New("malformed kick: not a JSON object")
	}
	var kick Kick
	for _, required := range []struct {
		name string
		read func(json.RawMessage) error
	}{
		{"project", func(v json.RawMessage) error { return readString(v, &kick.Project) }},
		{"env", func(v json.RawMessage) error { return readString(v, &kick.Env) }},
		{"uid", func(v json.RawMessage) error { return readInt(v, &kick.UID) }},
		{"gen", func(v json.RawMessage) error { return readInt(v, &kick.Gen) }},
	} {
		value, ok := fields[required.name]
		if !ok {
			return Kick{}, fmt.Errorf("malformed kick: missing field `%s`", required.name)
		}
		if err := required.read(value); err != nil {
			return Kick{}, fmt.Errorf("malformed kick: %s: %v", required.name, err)
		}
	}
	if value, ok := fields["slot"]; ok {
		if err := readString(value, &kick.Slot); err != nil {
			return Kick{}, fmt.Errorf("malformed kick: slot: %v", err)
		}
	}
	kick.Reason = ReasonLoginElsewhere
	if value, ok := fields["reason"]; ok && string(value) != "null" {
		var name string
		if readString(value, &name) == nil {
			kick.Reason = bounded(name)
		} else {
			kick.Reason = ""
		}
	}
	if value, ok := fields["message"]; ok {
		var message string
		if readString(value, &message) == nil {
			kick.Message = bounded(message)
		}
	}
	if err := checkKey(kick.Key); err != nil {
		return Kick{}, err
	}
	return kick, nil
}

func readString(value json.RawMessage, into *string) error {
	if len(value) == 0 || value[0] != '"' {
		return errors.New("not a string")
	}
	return json.Unmarshal(value, into)
}

// readInt takes a JSON integer (no fraction, no exponent) within int64.
func readInt(value json.RawMessage, into *int64) error {
	n, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	*into = n
	return nil
}

// bounded cuts text to maxCauseBytes at a character boundary.
func bounded(text string) string {
	if len(text) <= maxCauseBytes {
		return text
	}
	end := maxCauseBytes
	for end > 0 && !utf8.RuneStart(text[end]) {
		end--
	}
	return text[:end]
}

// checkKey is the server's key validation with the default limits.
func checkKey(key Key) error {
	for _, part := range []struct{ name, value string }{{"project", key.Project}, {"env", key.Env}} {
		if err := checkTenantPart(part.name, part.value); err != nil {
			return err
		}
	}
	if key.UID < 1 {
		return errors.New("uid must be >= 1")
	}
	if key.Slot != "" && !isPlace(key.Slot) {
		return checkTenantPart("slot", key.Slot)
	}
	return nil
}

// isPlace reports whether slot is a place of a user's pool (docs/design.md, "Pooled
// sessions"): '#' and an index below 1000 in decimal without a leading zero, the one form of
// slot with a '#' that a kick may name.
func isPlace(slot string) bool {
	digits := strings.TrimPrefix(slot, "#")
	if len(digits) == len(slot) || digits == "" || len(digits) > 3 || (len(digits) > 1 && digits[0] == '0') {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func checkTenantPart(name, value string) error {
	switch {
	case value == "":
		return fmt.Errorf("%s must not be empty", name)
	case utf8.RuneCountInString(value) > maxTenantChars:
		return fmt.Errorf("%s must be at most %d characters", name, maxTenantChars)
	case strings.ContainsRune(value, '#'):
		return fmt.Errorf("%s must not contain '#'", name)
	}
	for _, c := range value {
		if c < 0x20 || (c >= 0x7f && c <= 0x9f) {
			return fmt.Errorf("%s must not contain control characters", name)
		}
	}
	return nil
}
