package unique

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests run against the real unique-server binary: UNIQUE_SERVER_BIN, or the workspace's
// own build (`cargo build -p unique-server`, made when UNIQUE_SERVER_BIN is unset).

const (
	adminToken = "go-client-test-token-admin-0123456789"
	otherToken = "go-client-test-token-other-0123456789"
	testKey    = "go-client-test-signing-key-0123456789abcdef"
)

// server is one running unique-server and the files it was started with.
type server struct {
	url      string
	keysPath string
	keys     *SigningKeys
}

var (
	sharedOnce   sync.Once
	sharedServer *server
	sharedErr    error
)

// workspaceRoot is the Rust workspace holding this module (two levels up).
func workspaceRoot(t testing.TB) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("no workspace root: %v", err)
	}
	return root
}

// binary is the path of a workspace binary: the environment variable's value, or cargo's
// build of package (which also makes it when it is missing or stale).
func binary(t testing.TB, env, pkg string) string {
	if path := os.Getenv(env); path != "" {
		return path
	}
	root := workspaceRoot(t)
	build := exec.Command("cargo", "build", "--quiet", "-p", pkg, "--bin", pkg)
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("%s is unset and `cargo build -p %s` failed: %v", env, pkg, err)
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = filepath.Join(root, "target")
	}
	return filepath.Join(target, "debug", pkg)
}

// startServer starts unique-server on a free loopback port with the memory store, tokens
// (admin for project go, other for project elsewhere) and signed kicks; it stops with the
// process.
func startServer(t testing.TB) *server {
	sharedOnce.Do(func() { sharedServer, sharedErr = launch(t) })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedServer
}

func launch(t testing.TB) (*server, error) {
	s, _, err := launchAt(t, "127.0.0.1:0")
	return s, err
}

// launchAt starts a server as startServer does, listening on listen, and returns its process
// too (a test that stops the server kills it; TestMain kills any left).
func launchAt(t testing.TB, listen string) (*server, *exec.Cmd, error) {
	bin := binary(t, "UNIQUE_SERVER_BIN", "unique-server")
	dir, err := os.MkdirTemp("", "unique-go-test-")
	if err != nil {
		return nil, nil, err
	}
	tokens := filepath.Join(dir, "tokens.json")
	keysPath := filepath.Join(dir, "kick.keys")
	tokensText := fmt.Sprintf(`{"tokens": [
		{"name": "admin", "token": %q, "projects": ["go"], "roles": ["admin"]},
		{"name": "other", "token": %q, "projects": ["elsewhere"]}
	]}`, adminToken, otherToken)
	for path, text := range map[string]string{tokens: tokensText, keysPath: "# test key\n" + testKey + "\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return nil, nil, err
		}
	}
	cmd := exec.Command(bin, "--listen", listen, "--store", "memory",
		"--auth-tokens", tokens, "--kick-signing-keys", keysPath, "--kick-timeout", "3s", "--max-slots-per-user", "1000")
	cmd.Env = append(os.Environ(), "RUST_LOG=warn")
	dieWithParent(cmd)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("cannot start %s: %v", bin, err)
	}
	children = append(children, cmd)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	const announce = "unique-server listening on "
	if err != nil || !strings.HasPrefix(line, announce) {
		_ = cmd.Process.Kill()
		return nil, nil, fmt.Errorf("unique-server did not start: %q (%v)", line, err)
	}
	keys, err := LoadSigningKeys(keysPath)
	if err != nil {
		return nil, nil, err
	}
	return &server{url: strings.TrimSpace(strings.TrimPrefix(line, announce)), keysPath: keysPath, keys: keys}, cmd, nil
}

// TestMain stops the servers the tests started (the shared one and any of a test's own)
// after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	// The servers' processes are children of this one; they go with the process group's
	// end, and are killed here so that `go test` leaves nothing behind.
	killChildren()
	os.Exit(code)
}

var children []*exec.Cmd

func killChildren() {
	for _, c := range children {
		_ = c.Process.Kill()
	}
}

func (s *server) client(t testing.TB, token string) *Client {
	c, err := NewClient(s.url, WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testNode is a Node with its signed kick receiver on a loopback port.
type testNode struct {
	*Node
	receiver *httptest.Server
}

func (s *server) node(t testing.TB, options NodeOptions) *testNode {
	return s.nodeOver(t, s.client(t, adminToken), options)
}

// nodeWith is a node reaching the server through client.
func (s *server) nodeWith(t testing.TB, client *Client) *testNode {
	return s.nodeOver(t, client, NodeOptions{})
}

func (s *server) nodeOver(t testing.TB, client *Client, options NodeOptions) *testNode {
	mux := &lateHandler{}
	receiver := httptest.NewServer(mux)
	t.Cleanup(receiver.Close)
	node, err := NewNode(client, Owner{Region: "test", Endpoint: receiver.URL + "/kick"}, options)
	if err != nil {
		t.Fatal(err)
	}
	mux.set(NewKickReceiver(node, ReceiverOptions{Keys: s.keys}))
	t.Cleanup(func() { node.Shutdown(context.Background()) })
	return &testNode{Node: node, receiver: receiver}
}

// lateHandler is set once its node exists (the node needs the receiver's URL first).
type lateHandler struct {
	mu sync.Mutex
	h  *KickReceiver
}

func (l *lateHandler) set(h *KickReceiver) { l.mu.Lock(); l.h = h; l.mu.Unlock() }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	h := l.h
	l.mu.Unlock()
	h.ServeHTTP(w, r)
}

var keySeq struct {
	sync.Mutex
	n int64
}

// freshKey is a key no other test uses.
// drainedReleases reads unique_releases_by_reason_total{reason="node-draining",released="true"}
// from the server's /metrics.
func (s *server) drainedReleases(t testing.TB) float64 {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "unique_releases_by_reason_total{") &&
			strings.Contains(line, `reason="node-draining"`) && strings.Contains(line, `released="true"`) {
			var value float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &value); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return value
		}
	}
	t.Fatalf("no node-draining releases in /metrics:\n%s", body)
	return 0
}

func freshKey() Key {
	keySeq.Lock()
	defer keySeq.Unlock()
	keySeq.n++
	return Key{Project: "go", Env: "test", UID: time.Now().UnixNano()/1000 + keySeq.n}
}

// within waits for one value from ch, failing the test after a generous while (a hang
// guard, not a timing assertion).
func within[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}
