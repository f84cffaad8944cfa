package unique

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A deny-new pool of three: three logins take #0, #1 and #2; the fourth is refused with a
// *LimitReachedError listing the three places and their gens (never superseded, one attempt,
// nothing online); a logout frees its place, which the next login takes at the next gen.
func TestDenyNewRefusesTheFourthLoginAndAReleaseFreesAPlace(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{})
	ctx := context.Background()
	user := freshKey()
	pool := Pool{Policy: PolicyDenyNew, Limit: 3}

	var sessions []*Session
	for i, want := range []string{"#0", "#1", "#2"} {
		s, err := n.LoginPooled(ctx, user, pool)
		if err != nil {
			t.Fatalf("login %d: %v", i+1, err)
		}
		if s.Slot() != want || s.Key() != placeKey(user, i) || !s.Pooled() || s.EvictedOldest() {
			t.Fatalf("login %d: slot %q key %v pooled %v evicted %v; want %s", i+1, s.Slot(), s.Key(), s.Pooled(), s.EvictedOldest(), want)
		}
		sessions = append(sessions, s)
	}

	_, err := n.LoginPooled(ctx, user, pool)
	var full *LimitReachedError
	var loginErr *LoginError
	if !errors.As(err, &full) || !errors.Is(err, ErrLimitReached) || errors.Is(err, ErrSuperseded) || IsRetryable(err) {
		t.Fatalf("fourth login: %v; want a *LimitReachedError, not superseded, not retryable", err)
	}
	if !errors.As(err, &loginErr) || loginErr.Attempts != 1 {
		t.Fatalf("fourth login: %#v; want one attempt", err)
	}
	if full.Limit != 3 || len(full.Sessions) != 3 || full.Err.Status != http.StatusConflict || full.Err.Code != "limit_reached" {
		t.Fatalf("fourth login: %+v (%+v); want limit 3, three sessions, 409 limit_reached", full, full.Err)
	}
	for i, listed := range full.Sessions {
		if listed.Slot != sessions[i].Slot() || listed.Gen != sessions[i].Generation() || listed.Since == nil {
			t.Fatalf("listed place %d: %+v; want %s at gen %d with its login time", i, listed, sessions[i].Slot(), sessions[i].Generation())
		}
	}
	if n.Sessions() != 3 {
		t.Fatalf("%d sessions online here, want 3", n.Sessions())
	}

	// The logout names the place: #1 is released on the server, and the next login takes it.
	released, err := sessions[1].Logout(ctx)
	if err != nil || !released {
		t.Fatalf("logout of #1: %v, %v", released, err)
	}
	api := srv.client(t, adminToken)
	if view, err := api.Current(ctx, placeKey(user, 1)); err != nil || !view.Exists || view.Owner != nil {
		t.Fatalf("#1 after its logout: %+v, %v; want a tombstone", view, err)
	}
	again, err := n.LoginPooled(ctx, user, pool)
	if err != nil || again.Slot() != "#1" || again.Generation() != sessions[1].Generation()+1 {
		t.Fatalf("login after the logout: %v (slot %q); want #1 at gen %d", err, slotOf(again), sessions[1].Generation()+1)
	}
	list, err := api.Sessions(ctx, user.Project, user.Env, user.UID)
	if err != nil || len(list) != 3 || list[1].Slot != "#1" || list[1].Gen != again.Generation() {
		t.Fatalf("listing: %+v, %v", list, err)
	}
}

// An evict-oldest pool of three across two nodes: A's three logins fill it; B's fourth evicts
// A's oldest (#0), whose session ends with the eviction kick before B's login returns, and
// takes its place; A's other two stay online. Then a login on A evicts the oldest left, A's
// own #1, without a kick (the server does not kick a node's own endpoint): it ends
// EndReplaced before that login returns.
func TestEvictOldestEndsTheOldestSession(t *testing.T) {
	srv := startServer(t)
	a, b := srv.node(t, NodeOptions{}), srv.node(t, NodeOptions{})
	ctx := context.Background()
	user := freshKey()
	pool := Pool{Policy: PolicyEvictOldest, Limit: 3}

	var held []*Session
	for i := 0; i < 3; i++ {
		s, err := a.LoginPooled(ctx, user, pool)
		if err != nil {
			t.Fatalf("A's login %d: %v", i+1, err)
		}
		held = append(held, s)
	}
	oldest := held[0]
	fourth, err := b.LoginPooled(ctx, user, pool)
	if err != nil {
		t.Fatal(err)
	}
	l := fourth.Login()
	if fourth.Slot() != "#0" || !fourth.EvictedOldest() || !l.HasPrev || l.PrevGen != oldest.Generation() ||
		!l.Kicked || fourth.Generation() != oldest.Generation()+1 {
		t.Fatalf("B's login: slot %q evicted %v %+v (kick %s); want #0 evicting gen %d, kicked", fourth.Slot(), fourth.EvictedOldest(), l.ClaimResult, detail(l.KickDetail), oldest.Generation())
	}
	// Delivered before A's receiver answered the kick, so before B's claim returned.
	select {
	case ending := <-oldest.Ended():
		want := Ending{Kind: EndKicked, Reason: ReasonLoginElsewhere, Message: "session limit 3 reached", Gen: oldest.Generation()}
		if ending != want {
			t.Fatalf("the oldest session's ending %+v, want %+v", ending, want)
		}
	default:
		t.Fatal("the oldest session had not ended when the evicting login returned")
	}
	if a.Sessions() != 2 || b.Sessions() != 1 {
		t.Fatalf("sessions: A %d, B %d; want 2 and 1", a.Sessions(), b.Sessions())
	}
	for _, s := range held[1:] {
		select {
		case ending := <-s.Ended():
			t.Fatalf("%s ended: %+v", s.Slot(), ending)
		default:
		}
	}

	// The oldest now is A's #1; a login on A itself evicts it without a kick (same endpoint).
	fifth, err := a.LoginPooled(ctx, user, pool)
	if err != nil {
		t.Fatal(err)
	}
	if fifth.Slot() != "#1" || !fifth.EvictedOldest() || fifth.Login().KickDetail == nil || *fifth.Login().KickDetail != "self-replace-skipped" {
		t.Fatalf("A's login: slot %q %+v; want #1, self-replace-skipped", fifth.Slot(), fifth.Login().ClaimResult)
	}
	select {
	case ending := <-held[1].Ended():
		want := Ending{Kind: EndReplaced, Reason: ReasonLoginElsewhere, Gen: held[1].Generation()}
		if ending != want {
			t.Fatalf("A's #1 ending %+v, want %+v", ending, want)
		}
	default:
		t.Fatal("A's #1 had not ended when A's evicting login returned")
	}
	if a.Sessions() != 2 {
		t.Fatalf("A holds %d sessions, want 2", a.Sessions())
	}
}

// A pooled session's heartbeat reads its place: two heartbeats in a row find it online (a
// heartbeat naming the user's default slot would find no record and evict it at once).
func TestPooledHeartbeatReadsItsPlace(t *testing.T) {
	srv := startServer(t)
	target, _ := url.Parse(srv.url)
	proxy := httputil.NewSingleHostReverseProxy(target)
	batches := make(chan []Key, 16)
	watching := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == routeCurrentBatch {
			body, _ := io.ReadAll(r.Body)
			var read struct {
				Keys []Key `json:"keys"`
			}
			_ = json.Unmarshal(body, &read)
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			r.ContentLength = int64(len(body))
			recorder := httptest.NewRecorder()
			proxy.ServeHTTP(recorder, r)
			for k, v := range recorder.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(recorder.Code)
			_, _ = w.Write(recorder.Body.Bytes())
			// Sent once the answer is written: the heartbeat decides on it next.
			select {
			case batches <- read.Keys:
			default:
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer watching.Close()
	client, err := NewClient(watching.URL, WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	n := srv.nodeOver(t, client, NodeOptions{HeartbeatInterval: 100 * time.Millisecond})
	user := freshKey()
	s, err := n.LoginPooled(context.Background(), user, Pool{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		keys := within(t, batches, "heartbeat")
		if len(keys) != 1 || keys[0] != placeKey(user, 0) {
			t.Fatalf("heartbeat %d read %+v, want %v", i+1, keys, placeKey(user, 0))
		}
	}
	// The second heartbeat's read started after the first one's decision: still online.
	select {
	case ending := <-s.Ended():
		t.Fatalf("the pooled session ended: %+v", ending)
	default:
	}
	if n.Sessions() != 1 {
		t.Fatalf("%d sessions online, want 1", n.Sessions())
	}
}

// The Limit of a LimitReachedError and its sessions are read from the body; a pooled answer
// without a place (a server that ignores pools) is refused.
func TestLimitReachedIsReadFromItsCode(t *testing.T) {
	err := typedAnswerError(routeClaim, 409, []byte(`{"error":"limit_reached","message":"m","limit":2,"sessions":[{"slot":"#0","gen":3,"since":1700000000000},{"slot":"#1","gen":1,"since":null}]}`))
	var full *LimitReachedError
	if !errors.As(err, &full) || full.Limit != 2 || len(full.Sessions) != 2 || full.Sessions[1].Since != nil ||
		*full.Sessions[0].Since != 1700000000000 || full.Sessions[0].Gen != 3 {
		t.Fatalf("%#v", err)
	}
	// Any other code is an *Error, not a *LimitReachedError.
	if err := typedAnswerError(routeClaim, 409, []byte(`{"error":"too_many_slots","limit":2}`)); errors.As(err, &full) {
		t.Fatalf("too_many_slots read as %#v", err)
	}
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"gen":1,"prev_gen":0,"has_prev":false,"prev_owner":null,"kicked":false,"kick_detail":null,"replayed":false}`)
	}))
	defer old.Close()
	client, _ := NewClient(old.URL)
	if _, err := client.ClaimPooled(context.Background(), freshKey(), Owner{Endpoint: "http://127.0.0.1:9/kick"}, Pool{Limit: 2}, NewClaimID()); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("an answer without a place: %v", err)
	}
}

func ExampleNode_LoginPooled() {
	client, _ := NewClient("http://127.0.0.1:7420", WithToken("token"))
	node, _ := NewNode(client, Owner{Endpoint: "http://10.0.0.7:9001/kick"}, NodeOptions{})

	// At most three devices; a fourth login is refused while three are online.
	user := Key{Project: "game", Env: "prod", UID: 42}
	session, err := node.LoginPooled(context.Background(), user, Pool{Policy: PolicyDenyNew, Limit: 3})
	var full *LimitReachedError
	if errors.As(err, &full) {
		for _, s := range full.Sessions {
			fmt.Println("online:", s.Slot, "gen", s.Gen)
		}
		return
	}
	if err != nil {
		return
	}
	fmt.Println("logged in on place", session.Slot())
}

func slotOf(s *Session) string {
	if s == nil {
		return ""
	}
	return s.Slot()
}

func detail(d *string) string {
	if d == nil {
		return "<none>"
	}
	return *d
}
