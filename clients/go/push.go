package unique

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The push routes (docs/design.md, "Push kicks"): the kick stream a node holds open and the
// ack it answers each pushed kick with.
const (
	routeNodes     = "/v1/nodes/"
	routeKicks     = "/kicks"
	routeKicksAck  = "/kicks/ack"
	maxNodeIDChars = 64
)

// MaxPushLineBytes is the longest line a push node reads from its kick stream (64 KiB); a
// longer one ends the stream, which then reconnects.
const MaxPushLineBytes = 64 << 10

// DefaultPing is the ping interval assumed until the stream's hello names the server's.
const DefaultPing = 15 * time.Second

// PushOptions makes a Node take its kicks over the push stream instead of a kick receiver
// (NodeOptions.Push): the node holds GET /v1/nodes/{NodeID}/kicks open with its client's
// token, checks each kick exactly as its KickReceiver would check a POSTed one (size, the
// signature with Keys and Window, the payload, the key), applies it, and acks it with the
// status that receiver would have answered. Zero fields take their defaults.
type PushOptions struct {
	// NodeID is the node's id, 1-64 of A-Z a-z 0-9 . _ - (required): the owner's "node".
	NodeID string
	// Keys verifies every kick's signature (any key); a kick without a valid one is acked 401
	// and nothing is applied. nil accepts unsigned kicks (the server signs none without
	// --kick-signing-keys).
	Keys *SigningKeys
	// Window is the signature window (DefaultSignatureWindow).
	Window time.Duration
	// InitialBackoff and MaxBackoff bound the wait before a reconnect (100 ms doubling to
	// 5 s, each wait drawn at random up to its bound, reset at each hello).
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// HelloTimeout bounds opening the stream, its answer and hello line together (45 s,
	// three default pings).
	HelloTimeout time.Duration
	// MaxKicksInFlight bounds the kicks applied and acked at once (64): the stream is read
	// meanwhile, so its pings are never missed while a kick is handled.
	MaxKicksInFlight int
}

func (o PushOptions) withDefaults() PushOptions {
	if o.Window <= 0 {
		o.Window = DefaultSignatureWindow
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 3 * DefaultPing
	}
	if o.MaxKicksInFlight <= 0 {
		o.MaxKicksInFlight = 64
	}
	return o
}

// PushStatus is the state of a push node's stream (Node.PushStatus).
type PushStatus struct {
	// Connected: the stream is open and its hello was read, so kicks for the node reach it.
	Connected bool
	// Connections is how many streams were opened so far (each hello read counts one).
	Connections uint64
	// Acked is how many kicks were acked (the ack's POST answered).
	Acked uint64
	// LastError is why the last stream ended ("" while none has).
	LastError string
	// Stopped: Shutdown closed the stream for good.
	Stopped bool
}

// PushStatus is the push stream's state; the zero PushStatus for a node with an endpoint.
func (n *Node) PushStatus() PushStatus {
	if n.push == nil {
		return PushStatus{}
	}
	n.push.mu.Lock()
	defer n.push.mu.Unlock()
	return n.push.status
}

// checkNodeID is the server's rule for a node id.
func checkNodeID(node string) error {
	if node == "" || len(node) > maxNodeIDChars {
		return fmt.Errorf("unique: node id %q must be 1-%d characters", node, maxNodeIDChars)
	}
	for _, c := range node {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("unique: node id %q may hold only A-Z a-z 0-9 . _ -", node)
		}
	}
	return nil
}

// pushRunner is the goroutine holding a node's stream open.
type pushRunner struct {
	client   *Client
	options  PushOptions
	receiver *KickReceiver // the node's kick decision, shared with NewKickReceiver
	inFlight chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	acks     sync.WaitGroup

	mu     sync.Mutex
	status PushStatus
}

func startPush(client *Client, node *Node, options PushOptions) *pushRunner {
	options = options.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &pushRunner{
		client:   client,
		options:  options,
		receiver: NewKickReceiver(node, ReceiverOptions{Keys: options.Keys, Window: options.Window}),
		inFlight: make(chan struct{}, options.MaxKicksInFlight),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	go p.run(ctx)
	return p
}

// stop closes the stream and waits for the goroutine and the acks in flight.
func (p *pushRunner) stop() {
	p.cancel()
	<-p.done
}

func (p *pushRunner) update(change func(*PushStatus)) {
	p.mu.Lock()
	change(&p.status)
	p.mu.Unlock()
}

// run serves one stream after another until ctx ends, waiting a backoff between them.
func (p *pushRunner) run(ctx context.Context) {
	defer close(p.done)
	defer p.acks.Wait()
	nominal := p.options.InitialBackoff
	for {
		ended := p.serve(ctx, func() { nominal = p.options.InitialBackoff })
		if ctx.Err() != nil {
			break
		}
		p.update(func(s *PushStatus) { s.Connected = false; s.LastError = ended })
		// Full jitter: anywhere up to the nominal wait, which doubles to the cap.
		timer := time.NewTimer(randomDuration(nominal + 1))
		if nominal *= 2; nominal > p.options.MaxBackoff {
			nominal = p.options.MaxBackoff
		}
		select {
		case <-ctx.Done():
			timer.Stop()
		case <-timer.C:
			continue
		}
		break
	}
	p.update(func(s *PushStatus) { s.Connected = false; s.Stopped = true })
}

// pushLine is one line of the stream, the fields of every type together.
type pushLine struct {
	Type      string  `json:"type"`
	Node      string  `json:"node"`
	PingMS    uint64  `json:"ping_ms"`
	ID        string  `json:"id"`
	Body      string  `json:"body"`
	Signature *string `json:"signature"`
	Reason    string  `json:"reason"`
}

// serve opens one stream and reads it until it ends; returns why it ended. hello is called
// at each hello (the backoff's reset).
func (p *pushRunner) serve(parent context.Context, hello func()) string {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	// One watchdog: the answer and the hello within HelloTimeout, then a line (a ping at
	// least) within three ping intervals. It cancels the request, which ends the read.
	var expired atomic.Bool
	wait := p.options.HelloTimeout
	silence := time.Duration(0)
	watchdog := time.AfterFunc(wait, func() { expired.Store(true); cancel() })
	defer watchdog.Stop()
	why := func(err error) string {
		switch {
		case !expired.Load():
			return err.Error()
		case silence == 0:
			return fmt.Sprintf("no hello within %v", wait)
		default:
			return fmt.Sprintf("nothing received for %v", silence)
		}
	}

	body, err := p.client.openKickStream(ctx, p.options.NodeID)
	if err != nil {
		return "open: " + why(err)
	}
	defer body.Close()
	reader := bufio.NewReaderSize(body, MaxPushLineBytes)
	for {
		line, err := reader.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Sprintf("a line over %d bytes", MaxPushLineBytes)
		}
		if err != nil {
			// A line cut short by the stream's end is no line.
			if errors.Is(err, io.EOF) {
				return "the server ended the stream"
			}
			return "read: " + why(err)
		}
		if silence > 0 {
			watchdog.Reset(silence)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		var parsed pushLine
		if err := json.Unmarshal(line, &parsed); err != nil {
			return fmt.Sprintf("a line that does not read: %v", err)
		}
		switch {
		case parsed.Type == "hello":
			if parsed.Node != p.options.NodeID {
				return fmt.Sprintf("the stream serves node %q, not %q", parsed.Node, p.options.NodeID)
			}
			ping := DefaultPing
			if parsed.PingMS > 0 {
				ping = time.Duration(parsed.PingMS) * time.Millisecond
			}
			silence = 3 * ping
			watchdog.Reset(silence)
			hello()
			p.update(func(s *PushStatus) { s.Connected = true; s.Connections++ })
		case silence == 0:
			return "the stream did not begin with hello"
		case parsed.Type == "kick":
			if !p.kick(ctx, parsed) {
				return "stopped"
			}
		case parsed.Type == "closed":
			return "closed by the server: " + parsed.Reason
		}
		// "ping" and types this version does not know: nothing to do.
	}
}

// kick applies one pushed kick and acks it on a goroutine of its own, so that the stream
// keeps being read while the node handles it; it waits only for a place among
// MaxKicksInFlight. false when the stream ended first.
func (p *pushRunner) kick(ctx context.Context, line pushLine) bool {
	select {
	case p.inFlight <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	p.acks.Add(1)
	go func() {
		defer p.acks.Done()
		defer func() { <-p.inFlight }()
		signature := ""
		if line.Signature != nil {
			signature = *line.Signature
		}
		// The status the node's kick receiver would answer this kick POSTed to it.
		status := p.receiver.decide([]byte(line.Body), signature, line.Signature != nil).status
		// The ack outlives the stream it came on (the server waits for it by id), not
		// the node: Shutdown ends it.
		if _, err := p.client.ackKick(context.Background(), p.options.NodeID, line.ID, status); err == nil {
			p.update(func(s *PushStatus) { s.Acked++ })
		}
	}()
	return true
}

// openKickStream opens GET /v1/nodes/{node}/kicks and returns its body (the NDJSON lines),
// which ctx's end closes. The client's own timeout does not apply: the stream lasts.
func (c *Client) openKickStream(ctx context.Context, node string) (io.ReadCloser, error) {
	route := routeNodes + node + routeKicks
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+route, nil)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidParams, Route: route, Message: err.Error(), Cause: err}
	}
	req.Header.Set("Accept", "application/x-ndjson")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	streaming := &http.Client{Transport: c.http.Transport, CheckRedirect: c.http.CheckRedirect, Jar: c.http.Jar}
	resp, err := streaming.Do(req)
	if err != nil {
		return nil, transportError(route, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return nil, typedAnswerError(route, resp.StatusCode, body)
	}
	return resp.Body, nil
}

// ackKick POSTs /v1/nodes/{node}/kicks/ack {"id","status"}: whether the server was still
// waiting for that kick.
func (c *Client) ackKick(ctx context.Context, node, id string, status int) (bool, error) {
	var answer struct {
		Accepted bool `json:"accepted"`
	}
	err := c.call(ctx, routeNodes+node+routeKicksAck, struct {
		ID     string `json:"id"`
		Status int    `json:"status"`
	}{id, status}, &answer)
	return answer.Accepted, err
}
