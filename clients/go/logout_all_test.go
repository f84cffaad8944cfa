package unique

import (
	"context"
	"testing"
)

// An admin logout of all of a user's sessions: the default slot, a named slot and two pool
// places, all held by one Go node, are each released and kicked with the operator's message,
// and each session ends EndKicked with it before LogoutAll returns; a repeat finds none.
func TestLogoutAllEndsEverySessionOfTheUser(t *testing.T) {
	srv := startServer(t)
	n := srv.node(t, NodeOptions{})
	ctx := context.Background()
	user := freshKey()
	mobile := user
	mobile.Slot = "mobile"

	var held []*Session
	for _, key := range []Key{user, mobile} {
		s, err := n.Login(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	for i := 0; i < 2; i++ {
		s, err := n.LoginPooled(ctx, user, Pool{Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}

	api := srv.client(t, adminToken)
	out, err := api.LogoutAll(ctx, user.Project, user.Env, user.UID, "account closed")
	if err != nil {
		t.Fatal(err)
	}
	// Listing order: by slot, the default slot first ('#' sorts before 'm').
	want := []*Session{held[0], held[2], held[3], held[1]}
	if len(out) != len(want) {
		t.Fatalf("%d entries %+v, want %d", len(out), out, len(want))
	}
	for i, entry := range out {
		s := want[i]
		if entry.Slot != s.Slot() || !entry.Released || entry.Gen != s.Generation() || !entry.Kicked || entry.KickDetail != nil {
			t.Fatalf("entry %d: %+v (kick %s); want %q released at gen %d, kicked", i, entry, detail(entry.KickDetail), s.Slot(), s.Generation())
		}
		select {
		case ending := <-s.Ended():
			if w := (Ending{Kind: EndKicked, Reason: ReasonAdmin, Message: "account closed", Gen: s.Generation()}); ending != w {
				t.Fatalf("%q ended %+v, want %+v", s.Slot(), ending, w)
			}
		default:
			t.Fatalf("%q had not ended when LogoutAll returned", s.Slot())
		}
	}
	if n.Sessions() != 0 {
		t.Fatalf("%d sessions left here", n.Sessions())
	}
	again, err := api.LogoutAll(ctx, user.Project, user.Env, user.UID, "")
	if err != nil || len(again) != 0 {
		t.Fatalf("repeat: %+v, %v; want none", again, err)
	}
}
