package unique

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// The receiver's rules, request by request, against a node with one session.
func TestReceiverRules(t *testing.T) {
	keys, _ := NewSigningKeys([]byte(testKey))
	now := time.Unix(1_700_000_000, 0)
	kick := `{"project":"p","env":"e","uid":7,"gen":1}`
	padded := kick[:len(kick)-1] + `,"pad":"` + strings.Repeat("x", MaxKickBodyBytes-len(kick)-9) + `"}`
	cases := []struct {
		name    string
		method  string
		body    string
		sign    bool
		chunked bool
		status  int
		inBody  string
	}{
		{"signed", "POST", kick, true, false, 200, `{"ack":"no-session"}`},
		{"unknown fields ignored", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"later":[1]}`, true, false, 200, "no-session"},
		{"exactly 4 KiB", "POST", padded, true, false, 200, "no-session"},
		{"unsigned", "POST", kick, false, false, 401, "no unique-signature header"},
		{"4 KiB + 1", "POST", padded + " ", true, false, 413, "too_large"},
		{"4 KiB + 1, chunked", "POST", padded + " ", true, true, 413, "too_large"},
		{"GET", "GET", "", false, false, 405, "method_not_allowed"},
		{"no gen", "POST", `{"project":"p","env":"e","uid":7}`, true, false, 400, "missing field `gen`"},
		{"fractional uid", "POST", `{"project":"p","env":"e","uid":7.5,"gen":1}`, true, false, 400, "uid"},
		{"slot not a string", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":3}`, true, false, 400, "slot"},
		{"uid 0", "POST", `{"project":"p","env":"e","uid":0,"gen":1}`, true, false, 400, "uid must be >= 1"},
		{"a pool's place", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":"#0"}`, true, false, 200, "no-session"},
		{"the last place", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":"#999"}`, true, false, 200, "no-session"},
		{"no place past #999", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":"#1000"}`, true, false, 400, "slot must not contain"},
		{"no place with a leading zero", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":"#01"}`, true, false, 400, "slot must not contain"},
		{"# in a slot", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":"a#1"}`, true, false, 400, "slot must not contain"},
		{"# alone", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"slot":"#"}`, true, false, 400, "slot must not contain"},
		{"# in env", "POST", `{"project":"p","env":"a#b","uid":1,"gen":1}`, true, false, 400, "env must not contain"},
		{"not an object", "POST", `[1]`, true, false, 400, "malformed kick"},
		{"reason not a string still kicks", "POST", `{"project":"p","env":"e","uid":7,"gen":1,"reason":5,"message":{}}`, true, false, 200, "no-session"},
	}
	node, err := NewNode(&Client{}, Owner{Endpoint: "http://127.0.0.1:1/kick"}, NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	handler := NewKickReceiver(node, ReceiverOptions{Keys: keys, Now: func() time.Time { return now }})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(body) // no length known: sent chunked
			}
			req := httptest.NewRequest(c.method, "/kick", body)
			if c.chunked {
				req.ContentLength = -1
			}
			if c.sign {
				req.Header.Set(SignatureHeader, keys.Sign([]byte(c.body), now))
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.inBody) {
				t.Fatalf("%d %s, want %d with %q", rec.Code, rec.Body, c.status, c.inBody)
			}
			if c.status == 405 && rec.Header().Get("Allow") != "POST" {
				t.Fatalf("Allow: %q", rec.Header().Get("Allow"))
			}
		})
	}
}

// Kicks for one session, however many race, end it once, with the first kick's cause; a
// kick for an older or equal gen never ends the newer session (I6).
func TestKicksAreFencedAndEndASessionOnce(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{})
	s, err := n.Login(context.Background(), freshKey())
	if err != nil {
		t.Fatal(err)
	}
	if ack := n.HandleKick(Kick{Key: s.Key(), Gen: s.Generation(), Reason: ReasonAdmin}); ack != AckNotOlder {
		t.Fatalf("a kick at the session's own gen: %s", ack)
	}
	var wg sync.WaitGroup
	acks := make(chan KickAck, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acks <- n.HandleKick(Kick{Key: s.Key(), Gen: s.Generation() + 1, Reason: ReasonAdmin, Message: "bye"})
		}()
	}
	wg.Wait()
	close(acks)
	destroyed := 0
	for ack := range acks {
		if ack == AckDestroyed {
			destroyed++
		} else if ack != AckNoSession {
			t.Fatalf("ack %s", ack)
		}
	}
	ending := within(t, s.Ended(), "kick ending")
	if destroyed != 1 || ending.Kind != EndKicked || ending.Message != "bye" || len(s.Ended()) != 0 {
		t.Fatalf("%d destroyed, ending %+v", destroyed, ending)
	}
}

// A kick that comes while the login it replaces is still in flight refuses that login
// (ErrReplaced with the kick's reason): A's claim lands, B takes the key and kicks A's node
// (no session yet), and only then does A's answer arrive.
func TestAnEarlyKickRefusesTheLoginInFlight(t *testing.T) {
	srv := startServer(t)
	b := srv.node(t, NodeOptions{})
	ctx := context.Background()
	key := freshKey()
	target, _ := url.Parse(srv.url)
	proxy := httputil.NewSingleHostReverseProxy(target)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		if r.URL.Path == routeClaim {
			if _, err := b.Login(ctx, key); err != nil {
				t.Errorf("B's login: %v", err)
			}
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer slow.Close()
	client, _ := NewClient(slow.URL, WithToken(adminToken))
	a := srv.nodeWith(t, client)

	_, err := a.Login(ctx, key)
	var replaced *ReplacedError
	if !errors.As(err, &replaced) || !errors.Is(err, ErrReplaced) || replaced.Reason != ReasonLoginElsewhere || replaced.Login.Gen != 1 {
		t.Fatalf("A's login: %v, want replaced at gen 1", err)
	}
	if a.Sessions() != 0 || b.Sessions() != 1 {
		t.Fatalf("sessions: A %d, B %d", a.Sessions(), b.Sessions())
	}
}

// Early kicks are remembered only for keys with a login in flight here, and for at most
// MaxEarlyKicks keys; the rest are counted.
func TestEarlyKickMemoryIsBounded(t *testing.T) {
	n, err := NewNode(&Client{}, Owner{Endpoint: "http://127.0.0.1:1/kick"}, NodeOptions{MaxEarlyKicks: 1})
	if err != nil {
		t.Fatal(err)
	}
	for uid := int64(1); uid <= 1000; uid++ { // kicks for keys nothing here is logging in
		n.HandleKick(Kick{Key: Key{Project: "p", Env: "e", UID: uid}, Gen: 2})
	}
	if n.remembered != 0 || len(n.pending) != 0 || n.DroppedEarlyKicks() != 0 {
		t.Fatalf("remembered %d, pending %d", n.remembered, len(n.pending))
	}
	one, two := Key{Project: "p", Env: "e", UID: 1}, Key{Project: "p", Env: "e", UID: 2}
	n.expectLogin(one)
	n.expectLogin(two)
	n.HandleKick(Kick{Key: one, Gen: 2})
	n.HandleKick(Kick{Key: two, Gen: 2})
	if n.remembered != 1 || n.DroppedEarlyKicks() != 1 || n.replacedBy(one, 1) == nil || n.replacedBy(two, 1) != nil {
		t.Fatalf("remembered %d, dropped %d", n.remembered, n.DroppedEarlyKicks())
	}
	n.endLogin(one)
	n.endLogin(two)
	if n.remembered != 0 || len(n.pending) != 0 {
		t.Fatalf("after the logins: remembered %d, pending %d", n.remembered, len(n.pending))
	}
}

// `unique node-check` passes the Go receiver: real signed and forged kicks, one verdict per
// clause (docs/design.md, "Kick receiver").
func TestNodeCheckPassesTheGoReceiver(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{})
	check := binary(t, "UNIQUE_NODE_CHECK_BIN", "unique-node-check")
	out, err := exec.Command(check, "--url", n.receiver.URL+"/kick", "--signing-keys", srv.keysPath).CombinedOutput()
	t.Logf("unique-node-check:\n%s", out)
	if err != nil {
		t.Fatalf("unique-node-check failed: %v", err)
	}
}
