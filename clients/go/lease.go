package unique

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The lease routes (docs/design.md, "Leases over HTTP" and "Lease directory", D1-D7, N1-N3).
const (
	routeLeaseEnsure    = "/v1/lease/ensure"
	routeLeaseVerify    = "/v1/lease/verify"
	routeLeaseRelease   = "/v1/lease/release"
	routeLeaseLookup    = "/v1/lease/lookup"
	routeNodeRegister   = "/v1/nodes/register"
	routeNodeLookup     = "/v1/nodes/lookup"
	routeNodeDeregister = "/v1/nodes/deregister"
)

// MaxLeaseTTL is the longest ttl the lease routes take (one hour).
const MaxLeaseTTL = time.Hour

// Lease is one holding of a room: its node, the token that fences its commands, and an epoch
// greater than every earlier holding's (D4).
type Lease struct {
	Room  string
	Node  string
	Token string
	Epoch int64
	// TTLLeft is what the store said was left when it executed the call (0 for an expired
	// lease read by Lookup).
	TTLLeft time.Duration
	// Deadline is this process's clock, read before the request was sent, plus TTLLeft: a
	// holder that stops acting on the room by then never overlaps a successor.
	Deadline time.Time
}

// Registration is a node's address in the registry.
type Registration struct {
	Node string
	Addr string
	// UpdatedAt and ExpiresAt place the registration on this process's wall clock.
	UpdatedAt time.Time
	ExpiresAt time.Time
}

// Leases is the lease directory and node registry of one project, over a Client.
type Leases struct {
	client  *Client
	project string
}

// Leases returns the lease directory of project (leases belong to a whole project: with
// tokens, the token's scope must hold the project with every env).
func (c *Client) Leases(project string) *Leases { return &Leases{client: c, project: project} }

type leaseAnswer struct {
	Room      string `json:"room"`
	Node      string `json:"node"`
	Token     string `json:"token"`
	Epoch     int64  `json:"epoch"`
	TTLLeftMS int64  `json:"ttl_left_ms"`
}

func (a leaseAnswer) lease(sent time.Time) Lease {
	left := time.Duration(a.TTLLeftMS) * time.Millisecond
	return Lease{Room: a.Room, Node: a.Node, Token: a.Token, Epoch: a.Epoch, TTLLeft: left, Deadline: sent.Add(left)}
}

// ttlMillis is ttl in whole milliseconds, rounded up; the server refuses 0 and more than an hour.
func ttlMillis(route string, ttl time.Duration) (int64, error) {
	if ttl <= 0 || ttl > MaxLeaseTTL {
		return 0, &Error{Kind: ErrInvalidParams, Route: route,
			Message: fmt.Sprintf("ttl %v is outside 1ms..%v", ttl, MaxLeaseTTL)}
	}
	return int64((ttl + time.Millisecond - 1) / time.Millisecond), nil
}

// Ensure grants room to node when it is free or expired (D1), renews node's own valid lease
// keeping its token and epoch (D2), and otherwise answers the other node's valid lease
// unchanged (D3): compare the answer's Node with yours. Retrying after ErrUnavailable is safe.
func (l *Leases) Ensure(ctx context.Context, room, node string, ttl time.Duration) (Lease, error) {
	ms, err := ttlMillis(routeLeaseEnsure, ttl)
	if err != nil {
		return Lease{}, err
	}
	sent := time.Now()
	var answer leaseAnswer
	err = l.client.call(ctx, routeLeaseEnsure, struct {
		Project string `json:"project"`
		Room    string `json:"room"`
		Node    string `json:"node"`
		TTLMS   int64  `json:"ttl_ms"`
	}{l.project, room, node, ms}, &answer)
	return answer.lease(sent), err
}

type holding struct {
	Project string `json:"project"`
	Room    string `json:"room"`
	Node    string `json:"node"`
	Token   string `json:"token"`
}

// Verify is true iff node holds room under token and the lease is valid (D5). It writes nothing.
func (l *Leases) Verify(ctx context.Context, room, node, token string) (bool, error) {
	var answer struct {
		Valid bool `json:"valid"`
	}
	err := l.client.call(ctx, routeLeaseVerify, holding{l.project, room, node, token}, &answer)
	return answer.Valid, err
}

// Release deletes the lease only when node holds it under token, expired or not (D6).
func (l *Leases) Release(ctx context.Context, room, node, token string) (bool, error) {
	var answer struct {
		Released bool `json:"released"`
	}
	err := l.client.call(ctx, routeLeaseRelease, holding{l.project, room, node, token}, &answer)
	return answer.Released, err
}

// Lookup returns room's stored lease (an expired one with TTLLeft 0), or nil (D7).
func (l *Leases) Lookup(ctx context.Context, room string) (*Lease, error) {
	sent := time.Now()
	var answer struct {
		Lease *leaseAnswer `json:"lease"`
	}
	err := l.client.call(ctx, routeLeaseLookup, struct {
		Project string `json:"project"`
		Room    string `json:"room"`
	}{l.project, room}, &answer)
	if err != nil || answer.Lease == nil {
		return nil, err
	}
	lease := answer.Lease.lease(sent)
	return &lease, nil
}

type registrationAnswer struct {
	Node      string `json:"node"`
	Addr      string `json:"addr"`
	AgeMS     int64  `json:"age_ms"`
	TTLLeftMS int64  `json:"ttl_left_ms"`
}

func (a registrationAnswer) registration() Registration {
	now := time.Now()
	return Registration{
		Node:      a.Node,
		Addr:      a.Addr,
		UpdatedAt: now.Add(-time.Duration(a.AgeMS) * time.Millisecond),
		ExpiresAt: now.Add(time.Duration(a.TTLLeftMS) * time.Millisecond),
	}
}

// RegisterNode writes or replaces node's address, valid for ttl on the store's clock (N1).
func (l *Leases) RegisterNode(ctx context.Context, node, addr string, ttl time.Duration) (Registration, error) {
	ms, err := ttlMillis(routeNodeRegister, ttl)
	if err != nil {
		return Registration{}, err
	}
	var answer registrationAnswer
	err = l.client.call(ctx, routeNodeRegister, struct {
		Project string `json:"project"`
		Node    string `json:"node"`
		Addr    string `json:"addr"`
		TTLMS   int64  `json:"ttl_ms"`
	}{l.project, node, addr, ms}, &answer)
	return answer.registration(), err
}

type nodeRef struct {
	Project string `json:"project"`
	Node    string `json:"node"`
}

// LookupNode returns node's registration while it is valid, else nil (N2).
func (l *Leases) LookupNode(ctx context.Context, node string) (*Registration, error) {
	var answer struct {
		Node *registrationAnswer `json:"node"`
	}
	if err := l.client.call(ctx, routeNodeLookup, nodeRef{l.project, node}, &answer); err != nil || answer.Node == nil {
		return nil, err
	}
	registration := answer.Node.registration()
	return &registration, nil
}

// DeregisterNode removes node's registration; an unknown node is not an error (N3).
func (l *Leases) DeregisterNode(ctx context.Context, node string) error {
	var answer struct {
		Removed bool `json:"removed"`
	}
	return l.client.call(ctx, routeNodeDeregister, nodeRef{l.project, node}, &answer)
}

// The reasons a KeepAlive reports a loss.
const (
	// LossTakenOver: a renewal was answered with another node's lease.
	LossTakenOver = "taken-over"
	// LossExpired: the lease ran out before a renewal landed (renewals failing), or a
	// renewal was granted anew under another token (a new holding is not kept: it is given
	// back).
	LossExpired = "expired"
)

// LeaseLoss says why a KeepAlive lost its lease.
type LeaseLoss struct {
	Reason string
	// Holder is the lease that took the room over (LossTakenOver).
	Holder *Lease
	// Err is the last renewal's error, if renewals were failing.
	Err error
}

// KeepAlive renews one lease every ttl/3 (a renewal keeps token and epoch, D2) until Stop or
// a loss, which Lost yields once.
type KeepAlive struct {
	leases *Leases
	ttl    time.Duration
	lost   chan LeaseLoss
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	lease Lease
}

// KeepAlive keeps lease (from Ensure, held by its node) with renewals of ttl.
func (l *Leases) KeepAlive(lease Lease, ttl time.Duration) *KeepAlive {
	ctx, cancel := context.WithCancel(context.Background())
	k := &KeepAlive{leases: l, ttl: ttl, lost: make(chan LeaseLoss, 1), cancel: cancel, done: make(chan struct{}), lease: lease}
	go k.run(ctx)
	return k
}

// Lost yields one LeaseLoss when the lease is lost; it never yields after Stop.
func (k *KeepAlive) Lost() <-chan LeaseLoss { return k.lost }

// Lease is the lease as last renewed.
func (k *KeepAlive) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Stop stops renewing and, when release is true, releases the lease under its token
// (false when it was no longer held under that token).
func (k *KeepAlive) Stop(ctx context.Context, release bool) (bool, error) {
	k.cancel()
	<-k.done
	if !release {
		return false, nil
	}
	lease := k.Lease()
	return k.leases.Release(ctx, lease.Room, lease.Node, lease.Token)
}

func (k *KeepAlive) run(ctx context.Context) {
	defer close(k.done)
	interval := k.ttl / 3
	if interval <= 0 {
		interval = time.Millisecond
	}
	var lastErr error
	for {
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		held := k.Lease()
		renewed, err := k.leases.Ensure(ctx, held.Room, held.Node, k.ttl)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			lastErr = err
			if !time.Now().Before(held.Deadline) {
				k.lose(LeaseLoss{Reason: LossExpired, Err: lastErr})
				return
			}
		case renewed.Node != held.Node:
			k.lose(LeaseLoss{Reason: LossTakenOver, Holder: &renewed})
			return
		case renewed.Token != held.Token:
			// Granted anew: the old holding ran out. Never keep a holding not started with.
			_, _ = k.leases.Release(ctx, renewed.Room, renewed.Node, renewed.Token)
			k.lose(LeaseLoss{Reason: LossExpired, Err: errors.New("the lease ran out before it was renewed")})
			return
		default:
			lastErr = nil
			k.mu.Lock()
			k.lease = renewed
			k.mu.Unlock()
		}
	}
}

func (k *KeepAlive) lose(loss LeaseLoss) { k.lost <- loss }
