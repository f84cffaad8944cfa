package unique

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// A takeover between two Go nodes with a real signed kick: B's login kicks A's session,
// whose Ended yields the kick's reason before B's claim is answered; then an admin logout
// kicks B with the operator's message.
func TestTakeoverKicksTheOtherGoNode(t *testing.T) {
	srv := startServer(t)
	a, b := srv.node(t, NodeOptions{}), srv.node(t, NodeOptions{})
	ctx := context.Background()
	key := freshKey()

	first, err := a.Login(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.Login(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Login().Kicked || second.Generation() != first.Generation()+1 {
		t.Fatalf("B's login: %+v, want kicked at gen %d", second.Login().ClaimResult, first.Generation()+1)
	}
	// Delivered before A's receiver answered, so before B's claim returned.
	select {
	case ending := <-first.Ended():
		want := Ending{Kind: EndKicked, Reason: ReasonLoginElsewhere, Gen: first.Generation()}
		if ending != want {
			t.Fatalf("A's ending %+v, want %+v", ending, want)
		}
	default:
		t.Fatal("A's session had not ended when B's login returned")
	}
	if a.Sessions() != 0 || b.Sessions() != 1 {
		t.Fatalf("sessions: A %d, B %d", a.Sessions(), b.Sessions())
	}

	out, err := srv.client(t, adminToken).Logout(ctx, key, "account closed")
	if err != nil || !out.Released || !out.Kicked {
		t.Fatalf("admin logout: %+v, %v", out, err)
	}
	select {
	case ending := <-second.Ended():
		want := Ending{Kind: EndKicked, Reason: ReasonAdmin, Message: "account closed", Gen: second.Generation()}
		if ending != want {
			t.Fatalf("B's ending %+v, want %+v", ending, want)
		}
	default:
		t.Fatal("B's session had not ended when the admin logout returned")
	}
}

// The claimer's retry rules end to end: A's first claim lands but its answer is lost (the
// proxy answers 503); B takes the key before A's retry; the retry, with the same claim_id, is
// answered 409 superseded (gen 1, current gen 2): A returns ErrSuperseded at once with nothing
// online, and B is not kicked.
func TestSupersededRetryKicksNobody(t *testing.T) {
	srv := startServer(t)
	b := srv.node(t, NodeOptions{})
	ctx := context.Background()
	key := freshKey()

	target, _ := url.Parse(srv.url)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var claims int32
	lossy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != routeClaim || atomic.AddInt32(&claims, 1) != 1 {
			proxy.ServeHTTP(w, r)
			return
		}
		recorder := httptest.NewRecorder()
		proxy.ServeHTTP(recorder, r) // the claim lands: A wins gen 1
		if recorder.Code != http.StatusOK {
			t.Errorf("A's first claim: %d %s", recorder.Code, recorder.Body)
		}
		if _, err := b.Login(ctx, key); err != nil { // B takes the key: gen 2
			t.Errorf("B's login: %v", err)
		}
		reply(w, http.StatusServiceUnavailable, "unavailable", "answer lost")
	}))
	defer lossy.Close()

	client, err := NewClient(lossy.URL, WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	receiver := httptest.NewServer(http.NotFoundHandler())
	defer receiver.Close()
	a, err := NewNode(client, Owner{Endpoint: receiver.URL + "/kick"}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	receiver.Config.Handler = NewKickReceiver(a, ReceiverOptions{Keys: srv.keys})

	session, err := a.Login(ctx, key)
	if !errors.Is(err, ErrSuperseded) {
		t.Fatalf("A's login: %v, %v; want superseded", session, err)
	}
	var loginErr *LoginError
	var wire *Error
	if !errors.As(err, &loginErr) || loginErr.Attempts != 2 || !errors.As(err, &wire) || wire.Gen != 1 || wire.CurrentGen != 2 {
		t.Fatalf("A's error: %#v; want 2 attempts, gen 1, current gen 2", err)
	}
	if a.Sessions() != 0 || b.Sessions() != 1 {
		t.Fatalf("sessions: A %d, B %d", a.Sessions(), b.Sessions())
	}
	view, err := srv.client(t, adminToken).Current(ctx, key)
	if err != nil || view.Gen != 2 || view.Owner == nil || view.Owner.Endpoint != b.receiver.URL+"/kick" {
		t.Fatalf("the key: %+v, %v; want B at gen 2", view, err)
	}
}

// A same-node re-login ends the old session (EndReplaced) before the new login returns.
func TestSameNodeReplacementEndsTheOldSessionFirst(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{})
	ctx := context.Background()
	key := freshKey()
	old, err := n.Login(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := n.Login(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if detail := fresh.Login().KickDetail; detail == nil || *detail != "self-replace-skipped" {
		t.Fatalf("kick detail %v, want self-replace-skipped", detail)
	}
	select {
	case ending := <-old.Ended():
		want := Ending{Kind: EndReplaced, Reason: ReasonLoginElsewhere, Gen: old.Generation()}
		if ending != want {
			t.Fatalf("old ending %+v, want %+v", ending, want)
		}
	default:
		t.Fatal("the old session had not ended when the new login returned")
	}
	if n.Sessions() != 1 {
		t.Fatalf("%d sessions, want 1", n.Sessions())
	}
}

// A drain ends every session with node-draining and releases its key, telling the server
// (which counts 40 releases by reason node-draining); logins then fail with ErrDraining and
// send no claim.
func TestDrainEndsEverySessionAndReleasesItsKey(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{})
	ctx := context.Background()
	sessions := make([]*Session, 40)
	for i := range sessions {
		s, err := n.Login(ctx, freshKey())
		if err != nil {
			t.Fatal(err)
		}
		sessions[i] = s
	}
	before := srv.drainedReleases(t)
	report := n.Drain(ctx, time.Now().Add(30*time.Second))
	if report != (DrainReport{Ended: 40, Released: 40}) {
		t.Fatalf("drain report %+v", report)
	}
	if counted := srv.drainedReleases(t) - before; counted != 40 {
		t.Fatalf("the server counted %v releases by reason node-draining, want 40", counted)
	}
	api := srv.client(t, adminToken)
	for _, s := range sessions {
		ending := within(t, s.Ended(), "drain ending")
		want := Ending{Kind: EndDrained, Reason: ReasonNodeDraining, Gen: s.Generation(), Released: true}
		if ending != want || !ending.Reconnect() {
			t.Fatalf("ending %+v, want %+v", ending, want)
		}
		view, err := api.Current(ctx, s.Key())
		if err != nil || view.Owner != nil || view.Gen != s.Generation() {
			t.Fatalf("%v after the drain: %+v, %v; want a tombstone", s.Key(), view, err)
		}
	}
	late := freshKey()
	if _, err := n.Login(ctx, late); !errors.Is(err, ErrDraining) {
		t.Fatalf("login after drain: %v, want ErrDraining", err)
	}
	if view, err := api.Current(ctx, late); err != nil || view.Exists {
		t.Fatalf("a login refused by the drain sent its claim: %+v, %v", view, err)
	}
}

// The heartbeat evicts a session whose record another caller released (owner-empty).
func TestHeartbeatEvictsAReleasedSession(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{HeartbeatInterval: 100 * time.Millisecond})
	ctx := context.Background()
	s, err := n.Login(ctx, freshKey())
	if err != nil {
		t.Fatal(err)
	}
	if released, err := srv.client(t, adminToken).Release(ctx, s.Key(), s.Generation()); err != nil || !released {
		t.Fatalf("release: %v %v", released, err)
	}
	ending := within(t, s.Ended(), "eviction")
	if want := (Ending{Kind: EndEvicted, Reason: "owner-empty", Gen: s.Generation()}); ending != want {
		t.Fatalf("ending %+v, want %+v", ending, want)
	}
}

// Typed errors from the real server, chosen by the body's code.
func TestErrorsFromTheServer(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	owner := Owner{Endpoint: "http://127.0.0.1:9/kick"}
	cases := []struct {
		name   string
		client *Client
		key    Key
		want   error
	}{
		{"unknown token", srv.client(t, "no-such-token-0123456789abcdef"), freshKey(), ErrUnauthenticated},
		{"project outside the scope", srv.client(t, otherToken), freshKey(), ErrForbidden},
		{"uid 0", srv.client(t, adminToken), Key{Project: "go", Env: "test"}, ErrInvalidParams},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.client.Claim(ctx, c.key, owner, NewClaimID())
			if !errors.Is(err, c.want) || IsRetryable(err) {
				t.Fatalf("%v, want %v (not retryable)", err, c.want)
			}
		})
	}
	// The claimer fails at once on them: one attempt.
	_, err := NewClaimer(srv.client(t, otherToken), RetryPolicy{}).Login(ctx, freshKey(), owner)
	var loginErr *LoginError
	if !errors.As(err, &loginErr) || loginErr.Attempts != 1 || !errors.Is(err, ErrForbidden) {
		t.Fatalf("claimer: %v", err)
	}
	// Sessions and current answer through the same client.
	key := freshKey()
	if _, err := srv.client(t, adminToken).Claim(ctx, key, owner, NewClaimID()); err != nil {
		t.Fatal(err)
	}
	list, err := srv.client(t, adminToken).Sessions(ctx, key.Project, key.Env, key.UID)
	if err != nil || len(list) != 1 || list[0].Gen != 1 || list[0].Owner != owner {
		t.Fatalf("sessions: %+v, %v", list, err)
	}
}

func ExampleNode() {
	client, _ := NewClient("http://127.0.0.1:7420", WithToken("token"))
	node, _ := NewNode(client, Owner{Endpoint: "http://10.0.0.7:9001/kick"}, NodeOptions{})
	keys, _ := LoadSigningKeys("kick.keys")
	http.Handle("/kick", NewKickReceiver(node, ReceiverOptions{Keys: keys}))

	session, err := node.Login(context.Background(), Key{Project: "game", Env: "prod", UID: 42})
	if err != nil {
		return
	}
	go func() {
		ending := <-session.Ended()
		fmt.Println("session ended:", ending.Kind, ending.Reason, ending.Message)
	}()
}

// Sessions follows the server's pages: 105 slots of one user, more than one default page.
func TestSessionsFollowsPages(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	api := srv.client(t, adminToken)
	key := freshKey()
	owner := Owner{Endpoint: "http://127.0.0.1:9/kick"}
	for i := 0; i < 105; i++ {
		key.Slot = fmt.Sprintf("s%03d", i)
		if _, err := api.Claim(ctx, key, owner, NewClaimID()); err != nil {
			t.Fatal(err)
		}
	}
	list, err := api.Sessions(ctx, key.Project, key.Env, key.UID)
	if err != nil || len(list) != 105 || list[0].Slot != "s000" || list[104].Slot != "s104" {
		t.Fatalf("%d sessions, %v", len(list), err)
	}
}
