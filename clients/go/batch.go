package unique

import (
	"context"
	"sync"
	"time"
)

// batcher lets heartbeat checks that fall due close together share one CurrentBatch
// request, as the Rust client's batcher does: a check joins the open batch; the first check
// of a batch starts a timer, and when the window ends the timer sends whatever joined; a
// batch that reaches MaxBatchKeys is sent at once. Each batch is sent from its own goroutine
// and answers each check on a channel of its own, so a check that gave up holds up nobody.
type batcher struct {
	client *Client
	window time.Duration

	mu     sync.Mutex
	round  uint64 // batches sent, so a timer knows whether its batch is still open
	checks []batchCheck
}

type batchCheck struct {
	key    Key
	answer chan ViewResult // buffered 1: sending never waits
}

func newBatcher(client *Client, window time.Duration) *batcher {
	return &batcher{client: client, window: window}
}

// current reads key in a batch with the checks due around the same time.
func (b *batcher) current(ctx context.Context, key Key) (View, error) {
	answer := make(chan ViewResult, 1)
	b.mu.Lock()
	b.checks = append(b.checks, batchCheck{key, answer})
	switch {
	case len(b.checks) >= MaxBatchKeys:
		full := b.take()
		b.mu.Unlock()
		go b.send(full)
	case len(b.checks) == 1:
		round := b.round
		b.mu.Unlock()
		time.AfterFunc(b.window, func() { b.flush(round) })
	default:
		b.mu.Unlock()
	}
	select {
	case result := <-answer:
		return result.View, result.Err
	case <-ctx.Done():
		return View{}, ctx.Err()
	}
}

// take empties the open batch; b.mu is held.
func (b *batcher) take() []batchCheck {
	b.round++
	checks := b.checks
	b.checks = nil
	return checks
}

func (b *batcher) flush(round uint64) {
	b.mu.Lock()
	if b.round != round || len(b.checks) == 0 {
		b.mu.Unlock()
		return
	}
	checks := b.take()
	b.mu.Unlock()
	b.send(checks)
}

func (b *batcher) send(checks []batchCheck) {
	keys := make([]Key, len(checks))
	for i, check := range checks {
		keys[i] = check.key
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	views, err := b.client.CurrentBatch(ctx, keys)
	for i, check := range checks {
		if err != nil {
			check.answer <- ViewResult{Err: err}
		} else {
			check.answer <- views[i]
		}
	}
}
