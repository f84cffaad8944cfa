package unique

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// EndKind is how a session ended.
type EndKind string

// The endings of a session. Each session's Ended channel yields exactly one.
const (
	// EndKicked: a kick ended it; Reason is the kick's (ReasonLoginElsewhere, ReasonAdmin,
	// ...) and Message its text for the user.
	EndKicked EndKind = "kicked"
	// EndReplaced: a newer login of the same key on this node replaced it (the server
	// skips that kick, self-replace-skipped, so the node ends the old session itself,
	// before the new login returns). Reason is ReasonLoginElsewhere.
	EndReplaced EndKind = "replaced"
	// EndEvicted: the heartbeat found the record no longer holds it; Reason is the
	// heartbeat's: "not-exists", "gen-mismatch", "owner-empty" or "owner-changed".
	EndEvicted EndKind = "evicted"
	// EndLoggedOut: Session.Logout ended it; Reason is "logout".
	EndLoggedOut EndKind = "logged-out"
	// EndDrained: Node.Drain ended it; Reason is ReasonNodeDraining. The client should
	// reconnect: it lands on another node, since this one takes no logins any more.
	EndDrained EndKind = "drained"
	// EndShutDown: Node.Shutdown ended it; Reason is "node-shutdown".
	EndShutDown EndKind = "shut-down"
)

// ReasonNodeDraining is the reason of a session a drain ended.
const ReasonNodeDraining = "node-draining"

// Ending is how and why a session ended.
type Ending struct {
	Kind    EndKind
	Reason  string
	Message string
	// Gen is the gen of the session that ended.
	Gen int64
	// Released: the node released the key on the server (logout, drain, shutdown).
	Released bool
}

// Reconnect says whether the user's client should reconnect at once: after a drain or a
// shutdown it lands on another node; after a takeover or an admin logout it must not (two
// devices reconnecting after each other's takeover would take the key back and forth).
func (e Ending) Reconnect() bool { return e.Kind == EndDrained || e.Kind == EndShutDown }

// NodeOptions configures a Node. Zero fields take their defaults.
type NodeOptions struct {
	// Retry is the login and logout retry policy (DefaultRetryPolicy).
	Retry RetryPolicy
	// HeartbeatInterval is how often each session checks its record (5 s), each wait
	// jittered down to as little as 80 %.
	HeartbeatInterval time.Duration
	// BatchWindow is how long a heartbeat check waits for others to share its request
	// (250 ms, at most a twentieth of the interval).
	BatchWindow time.Duration
	// EarlyKickMemory is how long a kick that found no session, while a login of its key
	// was in flight here, refuses that login (60 s).
	EarlyKickMemory time.Duration
	// MaxEarlyKicks is how many keys at most have an early kick remembered at once (4096);
	// past it a kick is counted, not remembered, and the login it replaced is evicted by
	// its heartbeat instead (I5b). Negative remembers none.
	MaxEarlyKicks int
	// ShutdownTimeout bounds Shutdown's releases, and the release of a login that
	// completes after a drain or shutdown began (5 s).
	ShutdownTimeout time.Duration
	// Push, when set, makes the node one without a listener: its owner names the node
	// (PushOptions.NodeID) instead of an endpoint, and its kicks come over the push stream
	// (docs/design.md, "Push kicks") that the node holds open until Shutdown.
	Push *PushOptions
}

func (o NodeOptions) withDefaults() NodeOptions {
	o.Retry = o.Retry.orDefault()
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 5 * time.Second
	}
	if o.BatchWindow <= 0 {
		o.BatchWindow = 250 * time.Millisecond
	}
	if o.BatchWindow > o.HeartbeatInterval/20 {
		o.BatchWindow = o.HeartbeatInterval / 20
	}
	if o.EarlyKickMemory <= 0 {
		o.EarlyKickMemory = time.Minute
	}
	if o.MaxEarlyKicks == 0 {
		o.MaxEarlyKicks = 4096
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	return o
}

type nodeState int

const (
	nodeOpen nodeState = iota
	nodeDraining
	nodeShutDown
)

// Node holds sessions: logs them in (kicking their sessions elsewhere), watches each with a
// heartbeat, ends them when a kick or the heartbeat says so, and releases them. Serve its
// kicks with NewKickReceiver(node, ...) at the owner's endpoint, or give it NodeOptions.Push
// to take them over the push stream instead. Safe for concurrent use.
type Node struct {
	claimer *Claimer
	batcher *batcher
	owner   Owner
	options NodeOptions

	// mu guards everything below: kicks, admissions and endings decide under it.
	mu         sync.Mutex
	state      nodeState
	sessions   map[Key]*Session
	pending    map[Key]*pendingLogins
	remembered int
	dropped    uint64
	nextSweep  time.Time

	// push is the push stream's runner, nil for a node with an endpoint.
	push *pushRunner
}

// pendingLogins are the logins of one key in flight here.
type pendingLogins struct {
	logins int
	kick   *earlyKick
}

// earlyKick is a kick that found no session while a login of its key was in flight here.
type earlyKick struct {
	gen     int64
	at      time.Time
	reason  string
	message string
}

// NewNode returns a node that claims through client and advertises owner: with an endpoint
// (where its KickReceiver listens), or with NodeOptions.Push, the owner {"node": NodeID} and
// no endpoint (owner.Node is set to the NodeID), its kicks then coming over the push stream
// the node holds open from here until Shutdown. It fails when owner has no endpoint and
// there are no push options, when it has one and there are, or when the push options are
// invalid.
func NewNode(client *Client, owner Owner, options NodeOptions) (*Node, error) {
	if options.Push != nil {
		if owner.Endpoint != "" {
			return nil, errors.New("unique: a push node's owner has no endpoint (its kicks come over the push stream)")
		}
		if err := checkNodeID(options.Push.NodeID); err != nil {
			return nil, err
		}
		if owner.Node != "" && owner.Node != options.Push.NodeID {
			return nil, fmt.Errorf("unique: the owner's node %q is not the push node %q", owner.Node, options.Push.NodeID)
		}
		owner.Node = options.Push.NodeID
	} else if owner.Endpoint == "" || owner.Node != "" {
		return nil, errors.New("unique: the node's owner needs an endpoint (its kick receiver's URL), " +
			"or NodeOptions.Push for a node without a listener")
	}
	options = options.withDefaults()
	n := &Node{
		claimer:  NewClaimer(client, options.Retry),
		batcher:  newBatcher(client, options.BatchWindow),
		owner:    owner,
		options:  options,
		sessions: make(map[Key]*Session),
		pending:  make(map[Key]*pendingLogins),
	}
	if options.Push != nil {
		n.push = startPush(client, n, *options.Push)
	}
	return n, nil
}

// Session is one login of a key on this node, online until its Ended channel yields.
type Session struct {
	node    *Node
	key     Key
	login   Login
	pooled  bool
	evicted bool
	ended   chan Ending
	cancel  context.CancelFunc // stops the heartbeat
	ctx     context.Context
	done    bool // taken out of the node (under node.mu)
}

// Key is the session's key.
func (s *Session) Key() Key { return s.key }

// Slot is the slot the session holds: for a pooled login (LoginPooled) the place the server
// chose ("#0", "#1", ...), which its heartbeat, kicks, logout and a drain name; else Key().Slot.
func (s *Session) Slot() string { return s.key.Slot }

// Pooled reports whether the session came from LoginPooled.
func (s *Session) Pooled() bool { return s.pooled }

// EvictedOldest reports whether the session is a pooled login that took the place of the
// user's oldest online session (Login() then describes that session); false for any other.
func (s *Session) EvictedOldest() bool { return s.evicted }

// Generation is the session's fencing gen.
func (s *Session) Generation() int64 { return s.login.Gen }

// Login is the server's answer to the login, its claim_id and attempts.
func (s *Session) Login() Login { return s.login }

// Ended yields exactly one Ending when the session ends, whatever ends it, and is never
// closed. The Ending is delivered before the kick that caused it is answered, so closing the
// user's connection on it keeps the old and new sessions from overlapping (I5a). Dropping the
// *Session does not log out: the session stays online until an ending, since a connection
// handler that returns early must not release a key another goroutine still serves.
func (s *Session) Ended() <-chan Ending { return s.ended }

// Logout ends the session here (its heartbeat stops and kicks find nothing), releases it
// on the server with the retry policy, and delivers EndLoggedOut. It returns whether the
// server tombstoned the record; false, nil when the session had already ended.
func (s *Session) Logout(ctx context.Context) (bool, error) {
	n := s.node
	n.mu.Lock()
	taken := n.take(s)
	n.mu.Unlock()
	if !taken {
		return false, nil
	}
	released, err := n.claimer.Logout(ctx, s.key, s.login.Gen)
	s.deliver(Ending{Kind: EndLoggedOut, Reason: "logout", Gen: s.login.Gen, Released: released})
	return released, err
}

// deliver hands the one Ending over; it never waits (the channel holds one, and take lets
// only one ending through), since it runs under the node's lock.
func (s *Session) deliver(ending Ending) {
	select {
	case s.ended <- ending:
	default:
	}
}

// take removes s from the node and stops its heartbeat; false when it was gone already.
// n.mu is held.
func (n *Node) take(s *Session) bool {
	if s.done {
		return false
	}
	s.done = true
	if n.sessions[s.key] == s {
		delete(n.sessions, s.key)
	}
	s.cancel()
	return true
}

// Login logs key in with a fresh claim_id, kicking its session elsewhere, and brings the
// session online here. Errors: ErrDraining / ErrShutDown (no claim sent); a *LoginError from
// the claimer (ErrSuperseded among them: nothing went online); ErrReplaced (a *ReplacedError)
// when a newer login's kick reached this node while the claim was in flight.
func (n *Node) Login(ctx context.Context, key Key) (*Session, error) {
	return n.LoginWithClaimID(ctx, key, NewClaimID())
}

// ReplacedError is a login whose claim won a gen that a newer login's kick had already taken
// while the claim was in flight: the session never went online. errors.Is(err, ErrReplaced).
type ReplacedError struct {
	Login   Login
	Reason  string
	Message string
}

func (e *ReplacedError) Error() string {
	return fmt.Sprintf("session gen %d was replaced (%s) before it went online", e.Login.Gen, e.Reason)
}

// Is makes errors.Is(err, ErrReplaced) true.
func (e *ReplacedError) Is(target error) bool { return target == ErrReplaced }

// LoginWithClaimID is Login with a caller-chosen claim_id: resumes a login that gave up
// (LoginError.ClaimID), answered by the server's replay without a second kick.
func (n *Node) LoginWithClaimID(ctx context.Context, key Key, claimID string) (*Session, error) {
	n.mu.Lock()
	if err := n.refusal(); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	// Announced before the claim is sent, so that a kick that beats the answer is seen.
	n.expectLogin(key)
	n.mu.Unlock()
	login, err := n.claimer.LoginWithClaimID(ctx, key, n.owner, claimID)
	if err != nil {
		n.mu.Lock()
		n.endLogin(key)
		n.mu.Unlock()
		return nil, err
	}
	return n.admit(key, login, pooling{})
}

// maxPoolPlaces is how many places a pool may have at most ("#0" to "#999").
const maxPoolPlaces = 1000

// placeKey is the key of place index in user's pool.
func placeKey(user Key, index int) Key {
	user.Slot = fmt.Sprintf("#%d", index)
	return user
}

// LoginPooled logs a session of user (whose Slot must be "") in on a place of the user's pool
// with a fresh claim_id (docs/design.md, "Pooled sessions"): the server takes the lowest free
// place below pool.Limit, or at the limit, by pool.Policy, the oldest login's place
// (PolicyEvictOldest: that session is kicked first, ReasonLoginElsewhere with the message
// "session limit k reached") or none (PolicyDenyNew). The session is online here on its
// place's key: Slot() is the place, and its heartbeat, kicks, Logout and a drain name it.
//
// An evicted session held by this node ends EndReplaced before this returns (the server does
// not kick a node's own endpoint); one held by another node ends there with the kick. A kick
// for a place that comes while the claim is in flight refuses the login as for Login when
// pool.Limit is given (every place below it is expected); with the project's limit (0) the
// places are unknown here and such a session is left to its heartbeat (I5b).
//
// Errors: as Login's; a *LoginError over a *LimitReachedError (errors.Is(err,
// ErrLimitReached)) when PolicyDenyNew finds every place online: nothing went online.
func (n *Node) LoginPooled(ctx context.Context, user Key, pool Pool) (*Session, error) {
	return n.LoginPooledWithClaimID(ctx, user, pool, NewClaimID())
}

// LoginPooledWithClaimID is LoginPooled with a caller-chosen claim_id: resumes a pooled
// login that gave up (LoginError.ClaimID), answered with the place it took, without a second
// kick or a second place.
func (n *Node) LoginPooledWithClaimID(ctx context.Context, user Key, pool Pool, claimID string) (*Session, error) {
	// The place is the server's choice: a login is expected on every place it may pick, so
	// that a kick beating the answer is seen whichever place it names.
	places := pool.Limit
	if places > maxPoolPlaces {
		places = maxPoolPlaces
	}
	n.mu.Lock()
	if err := n.refusal(); err != nil {
		n.mu.Unlock()
		return nil, err
	}
	for i := 0; i < places; i++ {
		n.expectLogin(placeKey(user, i))
	}
	n.mu.Unlock()
	login, err := n.claimer.LoginPooledWithClaimID(ctx, user, n.owner, pool, claimID)
	n.mu.Lock()
	won := false
	for i := 0; i < places; i++ {
		place := placeKey(user, i)
		if err == nil && place == login.Key {
			// admit ends this one, after reading its early kick.
			won = true
			continue
		}
		n.endLogin(place)
	}
	if err == nil && !won {
		// A place not expected (the project's limit): admitted on the refusal alone.
		n.expectLogin(login.Key)
	}
	n.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return n.admit(login.Key, login.Login, pooling{pooled: true, evicted: login.Evicted})
}

// pooling is what admit records of a pooled login.
type pooling struct{ pooled, evicted bool }

func (n *Node) refusal() error {
	switch n.state {
	case nodeDraining:
		return ErrDraining
	case nodeShutDown:
		return ErrShutDown
	}
	return nil
}

// admit brings a login whose claim succeeded online, unless the node stopped taking logins
// or a newer login's kick came while the claim was in flight.
func (n *Node) admit(key Key, login Login, pool pooling) (*Session, error) {
	n.mu.Lock()
	replaced := n.replacedBy(key, login.Gen)
	n.endLogin(key)
	if err := n.refusal(); err != nil {
		n.mu.Unlock()
		// The gen was won after the node stopped taking logins: hand it back (a drain's
		// telling the server so).
		ctx, cancel := context.WithTimeout(context.Background(), n.options.ShutdownTimeout)
		defer cancel()
		_, _ = n.claimer.LogoutWithReason(ctx, key, login.Gen, releaseReason(err))
		return nil, err
	}
	if replaced != nil {
		n.mu.Unlock()
		return nil, &ReplacedError{Login: login, Reason: replaced.reason, Message: replaced.message}
	}
	var endedHere *Session
	if old := n.sessions[key]; old != nil {
		switch {
		case old.login.Gen == login.Gen:
			// A replay of the session online here: the same session.
			n.mu.Unlock()
			return old, nil
		case old.login.Gen > login.Gen:
			n.mu.Unlock()
			return nil, &ReplacedError{Login: login, Reason: ReasonLoginElsewhere}
		}
		// A newer login of the key on this node: the server skipped the kick, so the old
		// session ends here, before the new one is returned.
		n.take(old)
		endedHere = old
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{node: n, key: key, login: login, pooled: pool.pooled, evicted: pool.evicted,
		ended: make(chan Ending, 1), ctx: ctx, cancel: cancel}
	n.sessions[key] = s
	if endedHere != nil {
		endedHere.deliver(Ending{Kind: EndReplaced, Reason: ReasonLoginElsewhere, Gen: endedHere.login.Gen})
	}
	n.mu.Unlock()
	go n.heartbeat(s)
	return s, nil
}

// HandleKick applies one kick (KickTarget): a local session of the kick's key with an older
// gen ends with EndKicked, delivered before HandleKick returns; a newer or equal one is never
// touched (I6). Kicks for one session decide under one lock, so however many race, the session
// ends once, with the first kick's reason. A kick that finds no session while a login of its
// key is in flight here is remembered (bounded, see NodeOptions) so that login is refused.
func (n *Node) HandleKick(kick Kick) KickAck {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == nodeShutDown {
		return AckNoSession
	}
	s := n.sessions[kick.Key]
	if s == nil {
		n.rememberEarlyKick(kick)
		return AckNoSession
	}
	if s.login.Gen >= kick.Gen {
		return AckNotOlder
	}
	n.take(s)
	s.deliver(Ending{Kind: EndKicked, Reason: kick.Reason, Message: kick.Message, Gen: s.login.Gen})
	return AckDestroyed
}

// Sessions is how many sessions are online here.
func (n *Node) Sessions() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.sessions)
}

// DroppedEarlyKicks is how many early kicks were not remembered because MaxEarlyKicks keys
// already had one.
func (n *Node) DroppedEarlyKicks() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dropped
}

func (n *Node) expectLogin(key Key) {
	if p := n.pending[key]; p != nil {
		p.logins++
		return
	}
	n.pending[key] = &pendingLogins{logins: 1}
}

// endLogin: one login of key ended; the last one takes the key's early kick with it.
func (n *Node) endLogin(key Key) {
	p := n.pending[key]
	if p == nil {
		return
	}
	p.logins--
	if p.logins == 0 {
		delete(n.pending, key)
		if p.kick != nil {
			n.remembered--
		}
	}
}

// replacedBy is the early kick for a gen above gen that came while key's login was in flight.
func (n *Node) replacedBy(key Key, gen int64) *earlyKick {
	p := n.pending[key]
	if p == nil || p.kick == nil || p.kick.gen <= gen || time.Since(p.kick.at) >= n.options.EarlyKickMemory {
		return nil
	}
	return p.kick
}

// rememberEarlyKick keeps a kick that found no session, only while a login of its key is in
// flight here, and for at most MaxEarlyKicks keys: what the server sends can never grow it.
func (n *Node) rememberEarlyKick(kick Kick) {
	p := n.pending[kick.Key]
	if p == nil {
		return
	}
	now := time.Now()
	memory := n.options.EarlyKickMemory
	fresh := &earlyKick{gen: kick.Gen, at: now, reason: kick.Reason, message: kick.Message}
	if p.kick != nil {
		// The newest gen wins; an expired one is replaced by whatever comes.
		if kick.Gen >= p.kick.gen || now.Sub(p.kick.at) >= memory {
			p.kick = fresh
		}
		return
	}
	if n.remembered >= n.options.MaxEarlyKicks && !now.Before(n.nextSweep) {
		// Forget expired early kicks, at most once a second.
		n.nextSweep = now.Add(time.Second)
		for _, other := range n.pending {
			if other.kick != nil && now.Sub(other.kick.at) >= memory {
				other.kick = nil
				n.remembered--
			}
		}
	}
	if n.remembered >= n.options.MaxEarlyKicks {
		n.dropped++
		return
	}
	p.kick = fresh
	n.remembered++
}

// heartbeat checks s's record every (jittered) interval through the batcher and evicts s
// when the record no longer holds it. An error never evicts (I6).
func (n *Node) heartbeat(s *Session) {
	interval := n.options.HeartbeatInterval
	for {
		timer := time.NewTimer(interval - randomDuration(interval/5))
		select {
		case <-s.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		view, err := n.batcher.current(s.ctx, s.key)
		if err != nil {
			continue
		}
		if reason := decideEvict(s.login.Gen, n.owner, view); reason != "" {
			n.mu.Lock()
			if n.take(s) {
				s.deliver(Ending{Kind: EndEvicted, Reason: reason, Gen: s.login.Gen})
			}
			n.mu.Unlock()
			return
		}
	}
}

// decideEvict is whether the record still holds the session at gen claimed for owner: ""
// when it does, else why not.
func decideEvict(gen int64, owner Owner, view View) string {
	switch {
	case !view.Exists:
		return "not-exists"
	case view.Gen != gen:
		return "gen-mismatch"
	case view.Owner == nil:
		return "owner-empty"
	case *view.Owner != owner:
		return "owner-changed"
	}
	return ""
}

// DrainReport says what a drain or shutdown did.
type DrainReport struct {
	// Ended is how many sessions it ended.
	Ended int
	// Released is how many of them the server released in time.
	Released int
}

// Drain stops this node taking logins (Login fails with ErrDraining at once, and a login
// whose claim was in flight hands its gen back), ends every session with EndDrained and
// reason "node-draining", and releases their keys concurrently by deadline (or ctx's end).
// Each Ending is delivered once its release ended. Kicks that arrive meanwhile are fenced as
// ever (the sessions are gone, so they find none). Drain on a drained node ends nothing.
func (n *Node) Drain(ctx context.Context, deadline time.Time) DrainReport {
	return n.end(ctx, deadline, nodeDraining, EndDrained, ReasonNodeDraining)
}

// Shutdown is Drain with EndShutDown and reason "node-shutdown", bounded by
// NodeOptions.ShutdownTimeout; afterwards every kick is answered no-session without looking.
// A push node's stream (NodeOptions.Push) is closed once the releases ended, and Shutdown
// waits for its goroutine (and its acks in flight) to end.
func (n *Node) Shutdown(ctx context.Context) DrainReport {
	deadline := time.Now().Add(n.options.ShutdownTimeout)
	report := n.end(ctx, deadline, nodeShutDown, EndShutDown, "node-shutdown")
	if n.push != nil {
		n.push.stop()
	}
	return report
}

// releaseReason is what a release tells the server when the node refuses logins with
// refusal: node-draining for a drain; none for a shutdown.
func releaseReason(refusal error) string {
	if errors.Is(refusal, ErrDraining) {
		return ReasonNodeDraining
	}
	return ""
}

// releasers bounds the releases of a drain in flight at once.
const releasers = 32

func (n *Node) end(ctx context.Context, deadline time.Time, state nodeState, kind EndKind, reason string) DrainReport {
	n.mu.Lock()
	if state > n.state {
		n.state = state
	}
	told := ""
	if state == nodeDraining {
		told = ReasonNodeDraining
	}
	ended := make([]*Session, 0, len(n.sessions))
	for _, s := range n.sessions {
		ended = append(ended, s)
	}
	for _, s := range ended {
		n.take(s)
	}
	n.mu.Unlock()

	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	work := make(chan *Session)
	var wg sync.WaitGroup
	var mu sync.Mutex
	report := DrainReport{Ended: len(ended)}
	for i := 0; i < releasers && i < len(ended); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				released, _ := n.claimer.LogoutWithReason(ctx, s.key, s.login.Gen, told)
				if released {
					mu.Lock()
					report.Released++
					mu.Unlock()
				}
				s.deliver(Ending{Kind: kind, Reason: reason, Gen: s.login.Gen, Released: released})
			}
		}()
	}
	for _, s := range ended {
		work <- s
	}
	close(work)
	wg.Wait()
	return report
}
