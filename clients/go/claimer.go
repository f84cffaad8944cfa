package unique

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// RetryPolicy is how a Claimer retries: exponential backoff with full jitter within a
// budget. The zero value means DefaultRetryPolicy.
type RetryPolicy struct {
	// InitialBackoff is the nominal wait before the first retry (100 ms).
	InitialBackoff time.Duration
	// Multiplier is applied to the nominal wait after each retry (2).
	Multiplier int
	// MaxBackoff caps the nominal wait (2 s).
	MaxBackoff time.Duration
	// Budget is the time a login may take from its first attempt (25 s): no attempt starts
	// once it is spent, and an attempt in flight then is abandoned.
	Budget time.Duration
}

// DefaultRetryPolicy is the Rust claimer's: 100 ms, ×2, 2 s cap, 25 s budget.
var DefaultRetryPolicy = RetryPolicy{
	InitialBackoff: 100 * time.Millisecond,
	Multiplier:     2,
	MaxBackoff:     2 * time.Second,
	Budget:         25 * time.Second,
}

func (p RetryPolicy) orDefault() RetryPolicy {
	if p == (RetryPolicy{}) {
		return DefaultRetryPolicy
	}
	return p
}

// Login is a successful claim: the server's answer, the claim_id every attempt sent, and how
// many attempts it took.
type Login struct {
	ClaimResult
	ClaimID  string
	Attempts int
}

// LoginError is a login (or logout) that did not succeed. It keeps the claim_id: after
// ErrUnavailable the claim may still have landed, and LoginWithClaimID with the same id is
// answered by the replay instead of kicking again. After ErrSuperseded the login is over:
// do not retry it.
type LoginError struct {
	// Err is the last error: ErrInvalidParams, ErrSuperseded, ... at once, or the last
	// ErrThrottled / ErrUnavailable when the budget ran out.
	Err error
	// ClaimID is the claim_id the login sent ("" for a logout).
	ClaimID string
	// Attempts is how many attempts were made.
	Attempts int
}

func (e *LoginError) Error() string {
	return fmt.Sprintf("gave up after %d attempt(s): %v", e.Attempts, e.Err)
}

// Unwrap returns the last error, so errors.Is(err, ErrSuperseded) works on a LoginError.
func (e *LoginError) Unwrap() error { return e.Err }

// Claimer logs sessions in and out through a Client with the Rust claimer's retry rules:
// one fresh claim_id per login, sent unchanged on every retry (so a retry of a claim whose
// answer was lost is a replay: same gen, no second kick, I4); ErrThrottled and
// ErrUnavailable (transport failures included) retried with backoff; everything else, and
// ErrSuperseded above all, fails at once: the claim won a gen whose answer was lost and
// another login has the key now, so a retry would be superseded again and a new claim_id
// would kick the newer session.
type Claimer struct {
	client *Client
	policy RetryPolicy
}

// NewClaimer returns a claimer over client; the zero policy is DefaultRetryPolicy.
func NewClaimer(client *Client, policy RetryPolicy) *Claimer {
	return &Claimer{client: client, policy: policy.orDefault()}
}

// Login claims key for owner with a fresh claim_id. Errors: *LoginError.
func (c *Claimer) Login(ctx context.Context, key Key, owner Owner) (Login, error) {
	return c.LoginWithClaimID(ctx, key, owner, NewClaimID())
}

// LoginWithClaimID is Login with a caller-chosen claim_id: resumes a login that gave up
// (its LoginError.ClaimID) without risking a second kick.
func (c *Claimer) LoginWithClaimID(ctx context.Context, key Key, owner Owner, claimID string) (Login, error) {
	var result ClaimResult
	attempts, err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		result, err = c.client.Claim(ctx, key, owner, claimID)
		return err
	})
	if err != nil {
		return Login{}, &LoginError{Err: err, ClaimID: claimID, Attempts: attempts}
	}
	return Login{ClaimResult: result, ClaimID: claimID, Attempts: attempts}, nil
}

// PooledLogin is a successful pooled login: the Login, the place's key (the user's key with
// Slot set to the place the server chose) and whether the oldest login was evicted for it.
type PooledLogin struct {
	Login
	// Key is the place's key, which a heartbeat, a release or an admin logout names.
	Key Key
	// Evicted: the login took the place of the user's oldest online session, which
	// HasPrev, PrevGen, PrevOwner, Kicked and KickDetail describe.
	Evicted bool
}

// LoginPooled claims a place in user's pool (user.Slot must be "") for owner with a fresh
// claim_id and the retry rules of Login: a retry that finds its claim landed is answered with
// the same place, without a second kick or a second place. Errors: *LoginError; beneath it a
// *LimitReachedError when PolicyDenyNew finds the pool full (not retried).
func (c *Claimer) LoginPooled(ctx context.Context, user Key, owner Owner, pool Pool) (PooledLogin, error) {
	return c.LoginPooledWithClaimID(ctx, user, owner, pool, NewClaimID())
}

// LoginPooledWithClaimID is LoginPooled with a caller-chosen claim_id: resumes a pooled login
// that gave up (its LoginError.ClaimID).
func (c *Claimer) LoginPooledWithClaimID(ctx context.Context, user Key, owner Owner, pool Pool, claimID string) (PooledLogin, error) {
	var result PooledClaimResult
	attempts, err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		result, err = c.client.ClaimPooled(ctx, user, owner, pool, claimID)
		return err
	})
	if err != nil {
		return PooledLogin{}, &LoginError{Err: err, ClaimID: claimID, Attempts: attempts}
	}
	place := user
	place.Slot = result.Slot
	return PooledLogin{
		Login:   Login{ClaimResult: result.ClaimResult, ClaimID: claimID, Attempts: attempts},
		Key:     place,
		Evicted: result.Evicted,
	}, nil
}

// Logout releases the session at gen with the same retry rules. false: gen no longer holds
// the key. Errors: *LoginError.
func (c *Claimer) Logout(ctx context.Context, key Key, gen int64) (bool, error) {
	return c.LogoutWithReason(ctx, key, gen, "")
}

// LogoutWithReason is Logout telling the server why (Client.ReleaseWithReason); "" is none.
func (c *Claimer) LogoutWithReason(ctx context.Context, key Key, gen int64, reason string) (bool, error) {
	var released bool
	attempts, err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		if reason == "" {
			released, err = c.client.Release(ctx, key, gen)
		} else {
			released, err = c.client.ReleaseWithReason(ctx, key, gen, reason)
		}
		return err
	})
	if err != nil {
		return false, &LoginError{Err: err, Attempts: attempts}
	}
	return released, nil
}

// retry runs call until it succeeds, fails with an error that is not retryable, or the
// budget (or ctx) ends. It returns the attempts made and the last error.
func (c *Claimer) retry(ctx context.Context, call func(context.Context) error) (int, error) {
	p := c.policy
	ctx, cancel := context.WithTimeout(ctx, p.Budget)
	defer cancel()
	deadline, _ := ctx.Deadline()
	nominal := p.InitialBackoff
	if nominal > p.MaxBackoff {
		nominal = p.MaxBackoff
	}
	for attempts := 1; ; attempts++ {
		err := call(ctx)
		if err == nil {
			return attempts, nil
		}
		if errors.Is(err, ErrSuperseded) || !IsRetryable(err) {
			return attempts, err
		}
		wait := fullJitter(nominal)
		// An attempt that would start at or after the deadline has no time to run.
		if !time.Now().Add(wait).Before(deadline) {
			return attempts, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return attempts, err
		case <-timer.C:
		}
		nominal *= time.Duration(p.Multiplier)
		if nominal > p.MaxBackoff || nominal <= 0 {
			nominal = p.MaxBackoff
		}
	}
}

// fullJitter is a uniformly random wait in [0, nominal].
func fullJitter(nominal time.Duration) time.Duration {
	return randomDuration(nominal + 1)
}

// randomDuration is uniform in [0, n).
func randomDuration(n time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	v, err := rand.Int(rand.Reader, big.NewInt(int64(n)))
	if err != nil {
		return n / 2
	}
	return time.Duration(v.Int64())
}

// NewClaimID returns a fresh claim_id: a random (version 4) UUID, 122 random bits,
// hyphenated lower-case.
func NewClaimID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("unique: no randomness for a claim_id: " + err.Error())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
