package unique

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// The kinds of error a call can end with. Compare with errors.Is: every *Error is exactly
// one of them, chosen by the answer's "error" code (the status alone only when the body
// names none, since one status may carry several codes: 409 carries superseded,
// too_many_slots and limit_reached).
var (
	// ErrInvalidParams: 400 invalid_params. No retry fixes it.
	ErrInvalidParams = errors.New("invalid params")
	// ErrUnauthenticated: 401 unauthenticated, a missing, malformed or unknown token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrForbidden: 403 forbidden, a key or project outside the token's scope, or an admin
	// logout without the admin role.
	ErrForbidden = errors.New("forbidden")
	// ErrSuperseded: 409 superseded. The claim_id won a gen whose answer was lost and
	// another login (or a logout) has taken the key since; the login is over (C9).
	ErrSuperseded = errors.New("superseded")
	// ErrTooManySlots: 409 too_many_slots. The user already holds the most online
	// sessions allowed; only ending one of them helps.
	ErrTooManySlots = errors.New("too many slots")
	// ErrLimitReached: 409 limit_reached. A PolicyDenyNew pooled claim found every place of
	// the user's pool online; the error is a *LimitReachedError listing them. Not retried,
	// never superseded: only ending one of the sessions helps.
	ErrLimitReached = errors.New("limit reached")
	// ErrConflict: a 409 whose code this client does not know. Not retried.
	ErrConflict = errors.New("conflict")
	// ErrThrottled: 429 throttled. Retryable.
	ErrThrottled = errors.New("throttled")
	// ErrUnavailable: 503 unavailable, any status without a known meaning, a connection
	// failure or a timeout. Retryable.
	ErrUnavailable = errors.New("unavailable")
	// ErrNotFound: 404 not_found (a wrong base URL).
	ErrNotFound = errors.New("not found")
	// ErrMethodNotAllowed: 405 method_not_allowed.
	ErrMethodNotAllowed = errors.New("method not allowed")
	// ErrTooLarge: 413 too_large.
	ErrTooLarge = errors.New("too large")
	// ErrCorrupt: 500 corrupt (a lease route found a stored row it cannot read).
	ErrCorrupt = errors.New("corrupt")
	// ErrInternal: 500 internal.
	ErrInternal = errors.New("internal")
	// ErrNotImplemented: 501 not_implemented (a server without a lease directory).
	ErrNotImplemented = errors.New("not implemented")
)

// The node's own refusals.
var (
	// ErrDraining: Node.Drain has begun; this node takes no logins any more.
	ErrDraining = errors.New("node is draining")
	// ErrShutDown: Node.Shutdown has begun; this node takes no logins any more.
	ErrShutDown = errors.New("node is shut down")
	// ErrReplaced: the claim succeeded but a newer login of the key had already kicked
	// this node while it was in flight (or is online here): the session never went online.
	ErrReplaced = errors.New("replaced by a newer login before going online")
)

var codes = map[string]error{
	"invalid_params":     ErrInvalidParams,
	"unauthenticated":    ErrUnauthenticated,
	"forbidden":          ErrForbidden,
	"superseded":         ErrSuperseded,
	"too_many_slots":     ErrTooManySlots,
	"limit_reached":      ErrLimitReached,
	"throttled":          ErrThrottled,
	"unavailable":        ErrUnavailable,
	"not_found":          ErrNotFound,
	"method_not_allowed": ErrMethodNotAllowed,
	"too_large":          ErrTooLarge,
	"corrupt":            ErrCorrupt,
	"internal":           ErrInternal,
	"not_implemented":    ErrNotImplemented,
}

// Error is a call's failure: an error answer of the server, or a transport failure.
type Error struct {
	// Kind is one of the Err* values above; errors.Is(err, ErrSuperseded) tests it.
	Kind error
	// Route is the request's path, e.g. "/v1/claim".
	Route string
	// Status is the HTTP status, 0 when no answer arrived.
	Status int
	// Code is the answer's "error" code as sent ("" when the body named none).
	Code string
	// Message is the answer's "message", or what went wrong in transport.
	Message string
	// Gen and CurrentGen: for ErrSuperseded, the gen the claim_id won and the key's gen
	// now (both 0 when the body did not carry them).
	Gen, CurrentGen int64
	// Limit: for ErrTooManySlots, the most online sessions a user may hold; for
	// ErrLimitReached, the pool's limit (0 if unsaid).
	Limit int64
	// Cause is the transport error, if any.
	Cause error
}

func (e *Error) Error() string {
	where := e.Route
	if e.Status != 0 {
		where = fmt.Sprintf("%s: %d", e.Route, e.Status)
	}
	switch {
	case e.Kind == ErrSuperseded:
		return fmt.Sprintf("%s: superseded: claim won gen %d, the key is at gen %d", where, e.Gen, e.CurrentGen)
	case e.Message != "":
		return fmt.Sprintf("%s: %v: %s", where, e.Kind, e.Message)
	default:
		return fmt.Sprintf("%s: %v", where, e.Kind)
	}
}

// Is makes errors.Is(err, ErrThrottled) and the like work.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the transport error, if any.
func (e *Error) Unwrap() error { return e.Cause }

// Retryable reports whether a retry (with the same claim_id, for a claim) may succeed:
// ErrThrottled and ErrUnavailable.
func (e *Error) Retryable() bool { return e.Kind == ErrThrottled || e.Kind == ErrUnavailable }

// IsRetryable reports whether err is an *Error that is Retryable.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable()
}

// LimitReachedError is a PolicyDenyNew pooled claim that found all Limit places of the
// user's pool online (409 limit_reached): nothing was kicked or written. errors.Is(err,
// ErrLimitReached) holds, and errors.As reaches the *Error beneath (its Status, Message).
type LimitReachedError struct {
	// Limit is the pool's limit.
	Limit int64
	// Sessions are the places online, by place: slot, gen and login time, never owners.
	Sessions []PooledSession
	// Err is the answer as an *Error of kind ErrLimitReached.
	Err *Error
}

func (e *LimitReachedError) Error() string {
	return fmt.Sprintf("%v (%d of %d places online)", e.Err, len(e.Sessions), e.Limit)
}

// Unwrap returns the *Error, so errors.Is(err, ErrLimitReached) works.
func (e *LimitReachedError) Unwrap() error { return e.Err }

// errorBody is every error answer: {"error": code, "message": text}, a superseded one adding
// "gen" and "current_gen", a too_many_slots one "limit", a limit_reached one "limit" and
// "sessions".
type errorBody struct {
	Error      string          `json:"error"`
	Message    string          `json:"message"`
	Gen        *int64          `json:"gen"`
	CurrentGen *int64          `json:"current_gen"`
	Limit      *int64          `json:"limit"`
	Sessions   []PooledSession `json:"sessions"`
}

// typedAnswerError is answerError, a limit_reached answer read as a *LimitReachedError.
func typedAnswerError(route string, status int, body []byte) error {
	e := answerError(route, status, body)
	if e.Kind != ErrLimitReached {
		return e
	}
	var parsed errorBody
	_ = json.Unmarshal(body, &parsed)
	return &LimitReachedError{Limit: e.Limit, Sessions: parsed.Sessions, Err: e}
}

// answerError reads an error answer: by its "error" code first, then by the status.
func answerError(route string, status int, body []byte) *Error {
	e := &Error{Route: route, Status: status}
	var parsed errorBody
	if json.Unmarshal(body, &parsed) == nil {
		e.Code, e.Message = parsed.Error, parsed.Message
	}
	if kind, known := codes[e.Code]; known {
		e.Kind = kind
	} else {
		e.Kind = byStatus(route, status, e.Code)
	}
	switch e.Kind {
	case ErrSuperseded:
		// Both gens, or neither: a half-readable body is still superseded, at gens 0
		// (outside the gen domain), as the Rust client reads it.
		if parsed.Gen != nil && parsed.CurrentGen != nil && *parsed.Gen >= 1 && *parsed.Gen < *parsed.CurrentGen {
			e.Gen, e.CurrentGen = *parsed.Gen, *parsed.CurrentGen
		}
	case ErrTooManySlots, ErrLimitReached:
		if parsed.Limit != nil {
			e.Limit = *parsed.Limit
		}
	}
	return e
}

// byStatus is the kind of an answer whose body names no code this client knows.
func byStatus(route string, status int, code string) error {
	switch status {
	case http.StatusBadRequest:
		return ErrInvalidParams
	case http.StatusUnauthorized:
		return ErrUnauthenticated
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusMethodNotAllowed:
		return ErrMethodNotAllowed
	case http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case http.StatusTooManyRequests:
		return ErrThrottled
	case http.StatusNotImplemented:
		return ErrNotImplemented
	case http.StatusConflict:
		// The server answers a claim 409 without a readable code to nothing but a
		// superseded retry; a code it added later is not read as superseded.
		if route == routeClaim && code == "" {
			return ErrSuperseded
		}
		return ErrConflict
	default:
		return ErrUnavailable
	}
}

func transportError(route string, cause error) *Error {
	return &Error{Kind: ErrUnavailable, Route: route, Message: cause.Error(), Cause: cause}
}
