// Package unique is a Go node of unique-server (docs/nodes-in-any-language.md): the wire
// contract's client, the claimer's retry rules, a Node holding sessions with their heartbeat,
// drain and shutdown, and the signed kick receiver as an http.Handler. Standard library only.
//
//   - Client speaks the routes: Claim, ClaimPooled, Current, CurrentBatch, Release, Sessions,
//     Logout and LogoutAll (admin), and Leases for the lease directory. Errors are *Error, compared with
//     errors.Is (ErrSuperseded, ErrTooManySlots, ErrThrottled, ...) and chosen by the answer's
//     error code.
//   - Claimer retries a login with one claim_id (Login, LoginPooled).
//   - Node logs sessions in (Login, LoginPooled) and ends each exactly once: its Session's
//     Ended channel yields the Ending.
//   - NewKickReceiver serves the node's kicks; or, for a node with no listening port,
//     NodeOptions.Push takes them over the push stream (below).
//
// # Pooled logins
//
// Node.LoginPooled(ctx, user, Pool{Policy, Limit}) asks for a place in the user's pool instead
// of a named slot (docs/design.md, "Pooled sessions"): the server takes the lowest free place
// "#0".."#<k-1>", or with every place online evicts the oldest login (PolicyEvictOldest: its
// node gets a login-elsewhere kick, "session limit k reached") or refuses with a
// *LimitReachedError listing the places (PolicyDenyNew; errors.Is(err, ErrLimitReached), never
// ErrSuperseded, not retried). The session is online on its place: Session.Slot is the place,
// and its heartbeat, kicks, Logout and a drain name it.
//
// # A node without a listener
//
// NewNode(client, Owner{}, NodeOptions{Push: &PushOptions{NodeID: "n1", Keys: keys}}) claims for
// the owner {"node": "n1"} and holds GET /v1/nodes/n1/kicks open in a goroutine
// (docs/design.md, "Push kicks"): each pushed kick is checked and applied by the KickReceiver's
// own decision (size, signature with Keys and Window, payload, key, then HandleKick) and acked
// with the status that receiver would have answered, so a kick it cannot verify is acked 401
// and ends nothing. The stream reconnects after an error, a closed line, no hello in time or
// silence for three ping intervals, waiting 100 ms doubling to 5 s with full jitter; Shutdown
// closes it; Node.PushStatus reports Connected, Connections, Acked, LastError and Stopped.
package unique
