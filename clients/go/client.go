package unique

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The session routes of the wire contract (docs/design.md, "Wire contract").
const (
	routeClaim        = "/v1/claim"
	routeCurrent      = "/v1/current"
	routeCurrentBatch = "/v1/current/batch"
	routeRelease      = "/v1/release"
	routeLogout       = "/v1/logout"
	routeLogoutAll    = "/v1/logout/all"
	routeSessions     = "/v1/sessions"
)

// MaxBatchKeys is the most keys one CurrentBatch call may read.
const MaxBatchKeys = 100

// maxAnswerBytes bounds what is read of one answer (a full session listing is well under it).
const maxAnswerBytes = 4 << 20

// Key names one session: a user (project, env, uid) and a device slot ("" is the default).
type Key struct {
	Project string `json:"project"`
	Env     string `json:"env"`
	UID     int64  `json:"uid"`
	Slot    string `json:"slot,omitempty"`
}

func (k Key) String() string {
	if k.Slot == "" {
		return fmt.Sprintf("%s#%s#%d", k.Project, k.Env, k.UID)
	}
	return fmt.Sprintf("%s#%s#%d#%s", k.Project, k.Env, k.UID, k.Slot)
}

// Owner is where a session lives: how its node is kicked, by exactly one of Endpoint (the
// URL its kick receiver listens at) and Node (the node id whose push stream takes its kicks,
// docs/design.md "Push kicks"), and, optionally, the node's region and cluster.
type Owner struct {
	Region   string `json:"region"`
	Cluster  string `json:"cluster"`
	Endpoint string `json:"endpoint,omitempty"`
	Node     string `json:"node,omitempty"`
}

// ClaimResult is a claim's 200 answer.
type ClaimResult struct {
	// Gen is the session's fencing gen.
	Gen int64 `json:"gen"`
	// PrevGen and PrevOwner name the session it replaced, when HasPrev.
	PrevGen   int64  `json:"prev_gen"`
	HasPrev   bool   `json:"has_prev"`
	PrevOwner *Owner `json:"prev_owner"`
	// Kicked is true when the previous session's node confirmed the kick; KickDetail says
	// how the kick ended otherwise ("timeout", "connect-error", "non-2xx",
	// "self-replace-skipped", ...), or is nil when no kick was needed.
	Kicked     bool    `json:"kicked"`
	KickDetail *string `json:"kick_detail"`
	// Replayed is true when this claim_id had already won this gen: nothing was kicked or
	// written again (I4).
	Replayed bool `json:"replayed"`
}

// PoolPolicy is what a pooled claim does when every place of the user's pool is online.
type PoolPolicy string

const (
	// PolicyEvictOldest evicts the session with the oldest login: it is kicked
	// (ReasonLoginElsewhere, message "session limit k reached") and its place taken.
	PolicyEvictOldest PoolPolicy = "evict-oldest"
	// PolicyDenyNew refuses the claim with a *LimitReachedError; nothing is kicked or written.
	PolicyDenyNew PoolPolicy = "deny-new"
)

// Pool asks for a place in the user's pool instead of a slot (docs/design.md, "Pooled
// sessions"): the server takes the lowest free place below Limit ("#0", "#1", ...), or at the
// limit decides by Policy.
type Pool struct {
	// Policy is PolicyEvictOldest when empty (the server's default).
	Policy PoolPolicy `json:"policy,omitempty"`
	// Limit is the most sessions the user may hold, 1 to the project's session limit (the
	// server's --session-limit, above it is ErrInvalidParams); 0 sends none, so the
	// project's session limit applies.
	Limit int `json:"limit,omitempty"`
}

// PooledClaimResult is a pooled claim's 200 answer: the claim answer, the place the server
// chose and whether the oldest login was evicted for it.
type PooledClaimResult struct {
	ClaimResult
	// Slot is the place taken, "#0" to "#999": the slot every other route names it by.
	Slot string `json:"slot"`
	// Evicted is true when the claim took the place of the user's oldest online session;
	// HasPrev, PrevGen, PrevOwner, Kicked and KickDetail then describe that session.
	Evicted bool `json:"evicted"`
}

// PooledSession is one place of a full pool, as a *LimitReachedError lists it (never with
// its owner).
type PooledSession struct {
	// Slot is the place, "#0" to "#999".
	Slot string `json:"slot"`
	// Gen is the session's gen.
	Gen int64 `json:"gen"`
	// Since is the login time in milliseconds since the Unix epoch, nil when the record
	// does not say.
	Since *int64 `json:"since"`
}

// View is what the store holds for a key: its gen, the owner of its session (nil for a
// tombstone) and whether there is a record at all.
type View struct {
	Gen    int64  `json:"gen"`
	Owner  *Owner `json:"owner"`
	Exists bool   `json:"exists"`
}

// ViewResult is one key's answer in a batch: its View, or the error that key alone met.
type ViewResult struct {
	View View
	Err  error
}

// SessionEntry is one online session of a user.
type SessionEntry struct {
	Slot  string `json:"slot"`
	Gen   int64  `json:"gen"`
	Owner Owner  `json:"owner"`
}

// LogoutResult is an admin logout's answer.
type LogoutResult struct {
	Released   bool    `json:"released"`
	Gen        int64   `json:"gen"`
	Kicked     bool    `json:"kicked"`
	KickDetail *string `json:"kick_detail"`
}

// SlotLogout is one session of an admin logout of all of a user's sessions: its slot ("" for
// the default slot, "#i" for a pool's place) and what its logout did, as Logout of that slot
// answers it.
type SlotLogout struct {
	Slot string `json:"slot"`
	LogoutResult
}

// Client speaks the wire contract to one unique-server. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithToken sends "Authorization: Bearer <token>" with every /v1 request.
func WithToken(token string) ClientOption { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a client with a 10 s timeout.
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.http = hc } }

// NewClient returns a client of the server at baseURL (e.g. "http://127.0.0.1:7420").
// It fails when baseURL is not an http or https URL.
func NewClient(baseURL string, options ...ClientOption) (*Client, error) {
	if !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://") {
		return nil, fmt.Errorf("unique: base URL %q is not an http(s) URL", baseURL)
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: 10 * time.Second}}
	for _, option := range options {
		option(c)
	}
	return c, nil
}

// Claim sends one claim attempt: key for owner under claimID. Most callers want a Claimer
// (retries) or a Node (a session). Errors: *Error; ErrSuperseded carries Gen and CurrentGen.
func (c *Client) Claim(ctx context.Context, key Key, owner Owner, claimID string) (ClaimResult, error) {
	body := struct {
		Key
		Owner   Owner  `json:"owner"`
		ClaimID string `json:"claim_id"`
	}{key, owner, claimID}
	var answer ClaimResult
	err := c.call(ctx, routeClaim, body, &answer)
	return answer, err
}

// ClaimPooled sends one pooled claim attempt: a place in the pool of user (whose Slot must be
// "", since the server picks the place) for owner under claimID. Most callers want
// Claimer.LoginPooled (retries) or Node.LoginPooled (a session). Errors: *Error; a
// *LimitReachedError (errors.Is(err, ErrLimitReached)) when PolicyDenyNew finds every place
// online; ErrSuperseded as for Claim; ErrInvalidParams for a slot, a limit above the
// project's or an unknown policy.
func (c *Client) ClaimPooled(ctx context.Context, user Key, owner Owner, pool Pool, claimID string) (PooledClaimResult, error) {
	body := struct {
		Key
		Owner   Owner  `json:"owner"`
		ClaimID string `json:"claim_id"`
		Pool    Pool   `json:"pool"`
	}{user, owner, claimID, pool}
	var answer PooledClaimResult
	if err := c.call(ctx, routeClaim, body, &answer); err != nil {
		return answer, err
	}
	if answer.Slot == "" {
		// A server older than pools ignores the field and claims the default slot.
		return answer, &Error{Kind: ErrInvalidParams, Route: routeClaim, Status: http.StatusOK,
			Message: "the answer names no place: the server does not know pooled claims"}
	}
	return answer, nil
}

// Current reads key's record.
func (c *Client) Current(ctx context.Context, key Key) (View, error) {
	var answer View
	err := c.call(ctx, routeCurrent, key, &answer)
	return answer, err
}

// CurrentBatch reads up to MaxBatchKeys records in one request; the answer holds one
// ViewResult per key, in order. A key the server could not read alone has its Err set.
func (c *Client) CurrentBatch(ctx context.Context, keys []Key) ([]ViewResult, error) {
	if len(keys) > MaxBatchKeys {
		return nil, &Error{Kind: ErrInvalidParams, Route: routeCurrentBatch,
			Message: fmt.Sprintf("%d keys, at most %d", len(keys), MaxBatchKeys)}
	}
	var answer struct {
		Views []json.RawMessage `json:"views"`
	}
	if err := c.call(ctx, routeCurrentBatch, struct {
		Keys []Key `json:"keys"`
	}{keys}, &answer); err != nil {
		return nil, err
	}
	if len(answer.Views) != len(keys) {
		return nil, &Error{Kind: ErrUnavailable, Route: routeCurrentBatch,
			Message: fmt.Sprintf("%d views for %d keys", len(answer.Views), len(keys))}
	}
	results := make([]ViewResult, len(keys))
	for i, raw := range answer.Views {
		var probe struct {
			Error *string `json:"error"`
		}
		if err := json.Unmarshal(raw, &probe); err == nil && probe.Error != nil {
			results[i].Err = answerError(routeCurrentBatch, http.StatusOK, raw)
			continue
		}
		if err := json.Unmarshal(raw, &results[i].View); err != nil {
			results[i].Err = &Error{Kind: ErrUnavailable, Route: routeCurrentBatch, Message: "unreadable view: " + err.Error()}
		}
	}
	return results, nil
}

// Release tombstones the session at gen (a clean logout, C5). It answers false when gen no
// longer holds the key; repeating it at the same gen answers true again.
func (c *Client) Release(ctx context.Context, key Key, gen int64) (bool, error) {
	var answer struct {
		Released bool `json:"released"`
	}
	err := c.call(ctx, routeRelease, struct {
		Key
		Gen int64 `json:"gen"`
	}{key, gen}, &answer)
	return answer.Released, err
}

// ReleaseWithReason is Release telling the server why (ReasonNodeDraining for a drain), which
// it counts and audits; the reason changes nothing about what is released. A server older than
// the field refuses it (ErrInvalidParams): the release is then sent again without it.
func (c *Client) ReleaseWithReason(ctx context.Context, key Key, gen int64, reason string) (bool, error) {
	var answer struct {
		Released bool `json:"released"`
	}
	err := c.call(ctx, routeRelease, struct {
		Key
		Gen    int64  `json:"gen"`
		Reason string `json:"reason"`
	}{key, gen, reason}, &answer)
	if errors.Is(err, ErrInvalidParams) {
		return c.Release(ctx, key, gen)
	}
	return answer.Released, err
}

// Sessions lists a user's online sessions, sorted by slot (the default slot first),
// following the server's pages (a server older than paging answers one page with no next).
// A next that does not move forward is refused rather than followed forever.
func (c *Client) Sessions(ctx context.Context, project, env string, uid int64) ([]SessionEntry, error) {
	var all []SessionEntry
	var after *string
	for {
		var answer struct {
			Sessions []SessionEntry `json:"sessions"`
			Next     *string        `json:"next"`
		}
		err := c.call(ctx, routeSessions, struct {
			Project string  `json:"project"`
			Env     string  `json:"env"`
			UID     int64   `json:"uid"`
			After   *string `json:"after,omitempty"`
		}{project, env, uid, after}, &answer)
		if err != nil {
			return nil, err
		}
		all = append(all, answer.Sessions...)
		if answer.Next == nil {
			return all, nil
		}
		if after != nil && *answer.Next <= *after {
			return nil, &Error{Kind: ErrUnavailable, Route: routeSessions,
				Message: fmt.Sprintf("next page %q does not follow %q", *answer.Next, *after)}
		}
		after = answer.Next
	}
}

// Logout ends key's current session wherever it is online (an admin logout: with tokens,
// the token needs the admin role). reason, when not empty, reaches the node as the kick's
// message.
func (c *Client) Logout(ctx context.Context, key Key, reason string) (LogoutResult, error) {
	var answer LogoutResult
	err := c.call(ctx, routeLogout, struct {
		Key
		Reason string `json:"reason,omitempty"`
	}{key, reason}, &answer)
	return answer, err
}

// LogoutAll ends every online session of a user (an admin logout of each slot the user's
// listing holds: the default slot, named slots and pool places; with tokens, the token needs
// the admin role). reason, when not empty, reaches each node as the kick's message. The answer
// holds one SlotLogout per session listed, in listing order (by slot, the default slot first);
// none for a user without sessions.
func (c *Client) LogoutAll(ctx context.Context, project, env string, uid int64, reason string) ([]SlotLogout, error) {
	var answer struct {
		Sessions []SlotLogout `json:"sessions"`
	}
	err := c.call(ctx, routeLogoutAll, struct {
		Project string `json:"project"`
		Env     string `json:"env"`
		UID     int64  `json:"uid"`
		Reason  string `json:"reason,omitempty"`
	}{project, env, uid, reason}, &answer)
	return answer.Sessions, err
}

// call POSTs request as JSON to route and decodes a 200 answer into answer.
func (c *Client) call(ctx context.Context, route string, request, answer interface{}) error {
	payload, err := json.Marshal(request)
	if err != nil {
		return &Error{Kind: ErrInvalidParams, Route: route, Message: err.Error(), Cause: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+route, bytes.NewReader(payload))
	if err != nil {
		return &Error{Kind: ErrInvalidParams, Route: route, Message: err.Error(), Cause: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return transportError(route, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return transportError(route, err)
	}
	if resp.StatusCode != http.StatusOK {
		return typedAnswerError(route, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, answer); err != nil {
		return transportError(route, fmt.Errorf("unreadable answer: %w", err))
	}
	return nil
}

// errorsAs is errors.As for *Error.
func asError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}
