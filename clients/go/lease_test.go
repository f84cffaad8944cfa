package unique

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A holder that stops renewing loses its room once its lease runs out on the store's clock:
// the other node is granted it with a greater epoch, the old token no longer verifies or
// releases, and the old holder's KeepAlive reports the takeover.
func TestLeaseTakeoverAfterTheHolderStopsRenewing(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	leases := srv.client(t, adminToken).Leases("go")
	room := fmt.Sprintf("room-%d", time.Now().UnixNano())
	const ttl = 300 * time.Millisecond

	held, err := leases.Ensure(ctx, room, "node-a", ttl)
	if err != nil || held.Node != "node-a" {
		t.Fatalf("A's grant: %+v, %v", held, err)
	}
	// A renews while it runs: same token and epoch (D2).
	keep := leases.KeepAlive(held, ttl)
	// B is told A's lease while it is valid (D3).
	if other, err := leases.Ensure(ctx, room, "node-b", ttl); err != nil || other.Node != "node-a" || other.Token != held.Token {
		t.Fatalf("B while A holds: %+v, %v", other, err)
	}
	// A stops renewing without releasing (a hung holder).
	if _, err := keep.Stop(ctx, false); err != nil {
		t.Fatal(err)
	}
	if renewed := keep.Lease(); renewed.Token != held.Token || renewed.Epoch != held.Epoch {
		t.Fatalf("a renewal changed the holding: %+v -> %+v", held, renewed)
	}
	// B asks until it is granted: after A's ttl ran out on the store's clock (D1).
	var taken Lease
	for {
		taken, err = leases.Ensure(ctx, room, "node-b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if taken.Node == "node-b" {
			break
		}
		time.Sleep(ttl / 6)
	}
	if taken.Epoch <= held.Epoch || taken.Token == held.Token {
		t.Fatalf("B's lease %+v after A's %+v: want a new token and a greater epoch (D4)", taken, held)
	}
	if valid, err := leases.Verify(ctx, room, "node-a", held.Token); err != nil || valid {
		t.Fatalf("A's token still verifies: %v %v", valid, err)
	}
	if released, err := leases.Release(ctx, room, "node-a", held.Token); err != nil || released {
		t.Fatalf("A's late release: %v %v", released, err)
	}
	// A coming back with its old lease: its keep-alive's first renewal finds B.
	back := leases.KeepAlive(held, ttl)
	loss := within(t, back.Lost(), "lease loss")
	if loss.Reason != LossTakenOver || loss.Holder == nil || loss.Holder.Node != "node-b" {
		t.Fatalf("loss %+v", loss)
	}
	if looked, err := leases.Lookup(ctx, room); err != nil || looked == nil || looked.Token != taken.Token {
		t.Fatalf("lookup: %+v, %v", looked, err)
	}
	if released, err := leases.Release(ctx, room, "node-b", taken.Token); err != nil || !released {
		t.Fatalf("B's release: %v %v", released, err)
	}
	if looked, err := leases.Lookup(ctx, room); err != nil || looked != nil {
		t.Fatalf("lookup after release: %+v, %v", looked, err)
	}
}

func TestNodeRegistry(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	leases := srv.client(t, adminToken).Leases("go")
	node := fmt.Sprintf("node-%d", time.Now().UnixNano())
	if _, err := leases.RegisterNode(ctx, node, "10.0.0.7:9000", time.Minute); err != nil {
		t.Fatal(err)
	}
	found, err := leases.LookupNode(ctx, node)
	if err != nil || found == nil || found.Addr != "10.0.0.7:9000" || !found.ExpiresAt.After(time.Now()) {
		t.Fatalf("lookup: %+v, %v", found, err)
	}
	if err := leases.DeregisterNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	if found, err := leases.LookupNode(ctx, node); err != nil || found != nil {
		t.Fatalf("after deregister: %+v, %v", found, err)
	}
	// Leases belong to a whole project: a token of another project is refused.
	if _, err := srv.client(t, otherToken).Leases("go").Lookup(ctx, "r"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("other project's token: %v", err)
	}
	if _, err := leases.Ensure(ctx, "r", "n", 2*time.Hour); !errors.Is(err, ErrInvalidParams) {
		t.Fatalf("a two-hour ttl: %v", err)
	}
}
