package unique

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var nodeSeq struct {
	sync.Mutex
	n int
}

// freshNodeID is a node id no other test uses.
func freshNodeID() string {
	nodeSeq.Lock()
	defer nodeSeq.Unlock()
	nodeSeq.n++
	return fmt.Sprintf("go-push-%d-%d", time.Now().UnixNano(), nodeSeq.n)
}

// pushNode is a node without a listener on the server at base, its kicks pushed; the acks
// it POSTs are recorded.
func pushNode(t *testing.T, base string, keys *SigningKeys) (*Node, *ackRecorder) {
	t.Helper()
	acks := &ackRecorder{next: http.DefaultTransport}
	client, err := NewClient(base, WithToken(adminToken), WithHTTPClient(&http.Client{Transport: acks, Timeout: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	node, err := NewNode(client, Owner{Region: "test"}, NodeOptions{Push: &PushOptions{NodeID: freshNodeID(), Keys: keys}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Shutdown(context.Background()) })
	return node, acks
}

// ackRecorder keeps the status of every kick ack sent through it.
type ackRecorder struct {
	next     http.RoundTripper
	mu       sync.Mutex
	statuses []int
}

func (a *ackRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, routeKicksAck) && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		var ack struct {
			Status int `json:"status"`
		}
		_ = json.Unmarshal(body, &ack)
		a.mu.Lock()
		a.statuses = append(a.statuses, ack.Status)
		a.mu.Unlock()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	return a.next.RoundTrip(req)
}

func (a *ackRecorder) sent() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int(nil), a.statuses...)
}

// waitPush polls the node's push status until ok holds (a hang guard, not a timing
// assertion).
func waitPush(t *testing.T, node *Node, what string, ok func(PushStatus) bool) PushStatus {
	t.Helper()
	give := time.Now().Add(30 * time.Second)
	for {
		status := node.PushStatus()
		if ok(status) {
			return status
		}
		if time.Now().After(give) {
			t.Fatalf("push stream never %s: %+v", what, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func connected(s PushStatus) bool { return s.Connected }

// takeOver logs key in on a node with an HTTP kick receiver on srv, kicking the push node's
// session: the claim's answer.
func takeOver(t *testing.T, srv *server, key Key) Login {
	t.Helper()
	other := srv.node(t, NodeOptions{})
	session, err := other.Login(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return session.Login()
}

// A push-only node (no listener) is kicked on takeover: its owner names the node, the kick
// comes down its stream, its session ends login-elsewhere before the claim is answered, the
// ack is 200 and the claim answers kicked:true.
func TestPushNodeIsKickedOnTakeover(t *testing.T) {
	srv := startServer(t)
	node, acks := pushNode(t, srv.url, srv.keys)
	waitPush(t, node, "connected", connected)
	ctx := context.Background()
	key := freshKey()

	session, err := node.Login(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	view, err := srv.client(t, adminToken).Current(ctx, key)
	if err != nil || view.Owner == nil || view.Owner.Node != node.owner.Node || view.Owner.Endpoint != "" {
		t.Fatalf("record after the push node's login: %+v, %v", view, err)
	}

	won := takeOver(t, srv, key)
	if !won.Kicked || won.Gen != session.Generation()+1 {
		t.Fatalf("takeover: %+v, want kicked at gen %d", won.ClaimResult, session.Generation()+1)
	}
	select {
	case ending := <-session.Ended():
		want := Ending{Kind: EndKicked, Reason: ReasonLoginElsewhere, Gen: session.Generation()}
		if ending != want {
			t.Fatalf("ending %+v, want %+v", ending, want)
		}
	default:
		t.Fatal("the push node's session had not ended when the takeover returned")
	}
	if got := acks.sent(); len(got) != 1 || got[0] != http.StatusOK {
		t.Fatalf("acks sent: %v, want [200]", got)
	}
	// The server answers the claim as soon as the ack reaches it, so the node may count the
	// ack (when the ack's POST is answered) just after the takeover returned: wait for it.
	if status := waitPush(t, node, "counted one ack", func(s PushStatus) bool { return s.Acked == 1 }); !status.Connected || status.Connections != 1 {
		t.Fatalf("push status: %+v", status)
	}
	node.Shutdown(ctx)
	if status := node.PushStatus(); !status.Stopped || status.Connected {
		t.Fatalf("push status after shutdown: %+v", status)
	}
}

// A push node verifying with a key the server does not sign with acks the kick 401 without
// applying it: the claim answers kicked:false (non-2xx) and the session stays online.
func TestPushNodeWithTheWrongKeyAcks401(t *testing.T) {
	srv := startServer(t)
	wrong, err := NewSigningKeys([]byte("not-the-server-signing-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	node, acks := pushNode(t, srv.url, wrong)
	waitPush(t, node, "connected", connected)
	key := freshKey()
	session, err := node.Login(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}

	won := takeOver(t, srv, key)
	if won.Kicked || won.KickDetail == nil || *won.KickDetail != "non-2xx" {
		t.Fatalf("takeover: %+v, want kicked:false non-2xx", won.ClaimResult)
	}
	if got := acks.sent(); len(got) != 1 || got[0] != http.StatusUnauthorized {
		t.Fatalf("acks sent: %v, want [401]", got)
	}
	select {
	case ending := <-session.Ended():
		t.Fatalf("the session ended on a kick it could not verify: %+v", ending)
	default:
	}
	if node.Sessions() != 1 {
		t.Fatalf("sessions on the push node: %d, want 1", node.Sessions())
	}
}

// The server restarts on the same address: the push node's stream ends, it reconnects with
// backoff, and a takeover on the new server kicks it again.
func TestPushNodeReconnectsAfterServerRestart(t *testing.T) {
	first, cmd, err := launchAt(t, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	node, _ := pushNode(t, first.url, first.keys)
	waitPush(t, node, "connected", connected)

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	waitPush(t, node, "noticed the server's end", func(s PushStatus) bool { return !s.Connected && s.LastError != "" })
	second, cmd, err := launchAt(t, strings.TrimPrefix(first.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	status := waitPush(t, node, "reconnected", func(s PushStatus) bool { return s.Connected && s.Connections == 2 })
	if status.LastError == "" {
		t.Fatalf("push status after the restart: %+v", status)
	}

	session, err := node.Login(context.Background(), freshKey())
	if err != nil {
		t.Fatal(err)
	}
	if won := takeOver(t, second, session.Key()); !won.Kicked {
		t.Fatalf("takeover after the restart: %+v", won.ClaimResult)
	}
	ending := within(t, session.Ended(), "ending after the restart")
	if ending.Kind != EndKicked || ending.Reason != ReasonLoginElsewhere {
		t.Fatalf("ending after the restart: %+v", ending)
	}
}

// NewNode refuses an owner with an endpoint and push options, and an invalid node id.
func TestPushNodeOptionsAreChecked(t *testing.T) {
	client, err := NewClient("http://127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		owner Owner
		push  *PushOptions
	}{
		{Owner{Endpoint: "http://127.0.0.1:9/kick"}, &PushOptions{NodeID: "n1"}},
		{Owner{}, &PushOptions{NodeID: "bad/id"}},
		{Owner{}, &PushOptions{NodeID: ""}},
		{Owner{Node: "n2"}, &PushOptions{NodeID: "n1"}},
		{Owner{Node: "n1"}, nil},
	} {
		if node, err := NewNode(client, c.owner, NodeOptions{Push: c.push}); err == nil {
			node.Shutdown(context.Background())
			t.Errorf("NewNode(%+v, %+v) took it", c.owner, c.push)
		}
	}
}

// The stream's own rules, against a scripted stream (the real server cannot be made to break
// them): a closed line, a hello naming another node, a first line that is not hello, silence
// for three pings and no hello in time each end the stream, which reconnects; a pushed kick
// over 4 KiB is acked 413 and a payload that is not a kick 400, as the receiver answers them.
func TestPushStreamRulesAgainstAScriptedStream(t *testing.T) {
	const id = "scripted"
	var mu sync.Mutex // the node (set once it exists) and the connections seen
	var node *Node
	var connections int
	reasons := make(chan string, 16)
	acks := make(chan int, 16)
	hello := func(w http.ResponseWriter, ping int) {
		fmt.Fprintf(w, `{"type":"hello","node":%q,"ping_ms":%d}`+"\n", id, ping)
	}
	script := []func(w http.ResponseWriter, r *http.Request){
		func(w http.ResponseWriter, r *http.Request) {
			hello(w, 60000)
			fmt.Fprintln(w, `{"type":"closed","reason":"replaced"}`)
		},
		func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, `{"type":"hello","node":"another","ping_ms":60000}`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
		func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, `{"type":"ping"}`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
		func(w http.ResponseWriter, r *http.Request) {
			hello(w, 20)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
		func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // not even the answer's head
		},
		func(w http.ResponseWriter, r *http.Request) {
			hello(w, 60000)
			big, _ := json.Marshal(strings.Repeat("x", MaxKickBodyBytes+1))
			fmt.Fprintf(w, `{"type":"kick","id":"k1","body":%s,"signature":null}`+"\n", big)
			fmt.Fprintln(w, `{"type":"future","x":1}`)
			fmt.Fprintln(w, `{"type":"kick","id":"k2","body":"{}","signature":null}`)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
	}
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == routeNodes+id+routeKicksAck {
			var ack struct {
				Status int `json:"status"`
			}
			_ = json.NewDecoder(r.Body).Decode(&ack)
			acks <- ack.Status
			fmt.Fprintln(w, `{"accepted":true}`)
			return
		}
		mu.Lock()
		if connections > 0 {
			reasons <- node.PushStatus().LastError
		}
		connections++
		n := connections
		mu.Unlock()
		if n > len(script) {
			<-r.Context().Done()
			return
		}
		script[n-1](w, r)
	}))
	defer stream.Close()
	client, err := NewClient(stream.URL)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	node, err = NewNode(client, Owner{}, NodeOptions{Push: &PushOptions{NodeID: id,
		InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, HelloTimeout: 50 * time.Millisecond}})
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown(context.Background())
	for _, want := range []string{
		"closed by the server: replaced",
		`the stream serves node "another", not "scripted"`,
		"the stream did not begin with hello",
		"read: nothing received for 60ms",
		"open: no hello within 50ms",
	} {
		if got := within(t, reasons, want); got != want {
			t.Fatalf("the stream ended with %q, want %q", got, want)
		}
	}
	// Each kick is acked from a goroutine of its own: in either order.
	got := map[int]bool{within(t, acks, "the first ack"): true, within(t, acks, "the second ack"): true}
	if !got[http.StatusRequestEntityTooLarge] || !got[http.StatusBadRequest] {
		t.Fatalf("acks %v, want 413 and 400", got)
	}
	node.Shutdown(context.Background())
	if status := node.PushStatus(); !status.Stopped || status.Connections != 3 || status.Acked != 2 {
		t.Fatalf("push status after shutdown: %+v", status)
	}
}
