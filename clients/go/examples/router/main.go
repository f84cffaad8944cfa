// Command router is seed 004's room router (a room-service's room → owner-node directory
// with leases, and a node → private address registry) rewritten on the unique Go module: the
// leases live in unique-server's lease directory, so every room-service instance shares them
// and the store's clock, not each caller's, decides expiry.
//
// What changed from the seed's in-memory directory:
//   - EnsureOwner takes no `now`: the store's clock judges (D10), and a renewal never rotates
//     the token (D2), which the seed's comment asks for;
//   - ReleaseOwner names the holding by its token, not just the node, so a late release never
//     removes a newer holding of the same node (D6);
//   - ForceExpire is gone: tests give the server a short ttl instead;
//   - a held room is kept with a KeepAlive, whose Lost channel says when to stop serving it.
//
// Run it against a server:
//
//	go run ./examples/router -server http://127.0.0.1:7420 -token $TOKEN -node node-a -addr 10.0.0.7:9000 -room room-1
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	unique "github.com/unique-sessions/unique-go"
)

// Lease is the room's current owner and the token that fences its commands.
type Lease = unique.Lease

// NodeRegistration is a room-service instance's private address.
type NodeRegistration = unique.Registration

// Directory is the seed's room → owner directory, on the lease routes.
type Directory interface {
	Lookup(ctx context.Context, roomID string) (Lease, bool, error)
	EnsureOwner(ctx context.Context, roomID, nodeID string, ttl time.Duration) (Lease, error)
	VerifyOwner(ctx context.Context, roomID, nodeID, leaseToken string) (bool, error)
	ReleaseOwner(ctx context.Context, roomID, nodeID, leaseToken string) (bool, error)
}

// NodeRegistry is the seed's node → address registry.
type NodeRegistry interface {
	RegisterNode(ctx context.Context, nodeID, grpcAddr string, ttl time.Duration) error
	LookupNode(ctx context.Context, nodeID string) (NodeRegistration, bool, error)
	UnregisterNode(ctx context.Context, nodeID string) error
}

// Router implements both over one project's leases.
type Router struct{ leases *unique.Leases }

var (
	_ Directory    = Router{}
	_ NodeRegistry = Router{}
)

// Lookup returns the room's stored lease (expired ones too, with TTLLeft 0).
func (r Router) Lookup(ctx context.Context, roomID string) (Lease, bool, error) {
	lease, err := r.leases.Lookup(ctx, roomID)
	if err != nil || lease == nil {
		return Lease{}, false, err
	}
	return *lease, true, nil
}

// EnsureOwner grants or renews nodeID's lease, or returns the other node's valid lease:
// the caller serves the room only when the answer's Node is its own.
func (r Router) EnsureOwner(ctx context.Context, roomID, nodeID string, ttl time.Duration) (Lease, error) {
	return r.leases.Ensure(ctx, roomID, nodeID, ttl)
}

// VerifyOwner is true while nodeID holds the room under leaseToken (fence a commit with it).
func (r Router) VerifyOwner(ctx context.Context, roomID, nodeID, leaseToken string) (bool, error) {
	return r.leases.Verify(ctx, roomID, nodeID, leaseToken)
}

// ReleaseOwner gives the room back so a successor need not wait for the ttl.
func (r Router) ReleaseOwner(ctx context.Context, roomID, nodeID, leaseToken string) (bool, error) {
	return r.leases.Release(ctx, roomID, nodeID, leaseToken)
}

// RegisterNode writes or renews the node's address for ttl.
func (r Router) RegisterNode(ctx context.Context, nodeID, grpcAddr string, ttl time.Duration) error {
	_, err := r.leases.RegisterNode(ctx, nodeID, grpcAddr, ttl)
	return err
}

// LookupNode returns the node's address while its registration is valid.
func (r Router) LookupNode(ctx context.Context, nodeID string) (NodeRegistration, bool, error) {
	found, err := r.leases.LookupNode(ctx, nodeID)
	if err != nil || found == nil {
		return NodeRegistration{}, false, err
	}
	return *found, true, nil
}

// UnregisterNode removes the node's registration.
func (r Router) UnregisterNode(ctx context.Context, nodeID string) error {
	return r.leases.DeregisterNode(ctx, nodeID)
}

func main() {
	server := flag.String("server", "http://127.0.0.1:7420", "unique-server's URL")
	token := flag.String("token", os.Getenv("UNIQUE_TOKEN"), "bearer token (a whole-project scope)")
	project := flag.String("project", "rooms", "the project the leases belong to")
	node := flag.String("node", "", "this instance's node id")
	addr := flag.String("addr", "", "this instance's private gRPC address")
	room := flag.String("room", "", "the room to own")
	ttl := flag.Duration("ttl", 15*time.Second, "lease and registration ttl")
	flag.Parse()
	if *node == "" || *addr == "" || *room == "" {
		log.Fatal("router: -node, -addr and -room are required")
	}
	client, err := unique.NewClient(*server, unique.WithToken(*token))
	if err != nil {
		log.Fatal(err)
	}
	router := Router{leases: client.Leases(*project)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, router, *node, *addr, *room, *ttl); err != nil {
		log.Fatal(err)
	}
}

// run registers the node, owns the room until interrupted or the lease is lost, and gives
// both back.
func run(ctx context.Context, router Router, node, addr, room string, ttl time.Duration) error {
	if err := router.RegisterNode(ctx, node, addr, ttl); err != nil {
		return err
	}
	defer func() { _ = router.UnregisterNode(context.Background(), node) }()
	lease, err := router.EnsureOwner(ctx, room, node, ttl)
	if err != nil {
		return err
	}
	if lease.Node != node {
		owner, found, err := router.LookupNode(ctx, lease.Node)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("room %s is held by %s, whose address is unknown", room, lease.Node)
		}
		fmt.Printf("room %s is held by %s: forward to %s\n", room, lease.Node, owner.Addr)
		return nil
	}
	fmt.Printf("serving room %s (epoch %d)\n", room, lease.Epoch)
	keep := router.leases.KeepAlive(lease, ttl)
	select {
	case loss := <-keep.Lost():
		fmt.Printf("room %s lost (%s): stop serving it\n", room, loss.Reason)
		return nil
	case <-ctx.Done():
		released, err := keep.Stop(context.Background(), true)
		fmt.Printf("room %s released: %v\n", room, released)
		return err
	}
}
