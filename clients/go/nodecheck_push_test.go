package unique

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `unique-node-check --push` checks the Go push node (NodeOptions.Push): the check plays the
// server of its kick stream and pushes real signed, forged and malformed kicks, one verdict
// per clause (docs/design.md, "Push kicks"). A node holding the key passes every clause; one
// without keys fails exactly the signature clauses.
func TestNodeCheckPushChecksTheGoPushNode(t *testing.T) {
	keysPath := filepath.Join(t.TempDir(), "kick.keys")
	if err := os.WriteFile(keysPath, []byte(testKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadSigningKeys(keysPath)
	if err != nil {
		t.Fatal(err)
	}
	check := binary(t, "UNIQUE_NODE_CHECK_BIN", "unique-node-check")
	for _, tc := range []struct {
		name string
		keys *SigningKeys
		code int
		last string
	}{
		{"with keys", keys, 0, "all 10 clauses passed"},
		{"without keys", nil, 1, "6 of 10 clauses failed: unsigned, forged, tampered-body, " +
			"stale-timestamp, future-timestamp, malformed-signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(check, "--push", "--listen", "127.0.0.1:0", "--signing-keys", keysPath,
				"--node", "go-push-checked")
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// "unique-node-check: listening on http://ADDR; waiting up to …"
			lines := bufio.NewReader(stderr)
			first, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("no first line on stderr: %v", err)
			}
			const announce = "unique-node-check: listening on "
			url, _, ok := strings.Cut(strings.TrimPrefix(first, announce), ";")
			if !strings.HasPrefix(first, announce) || !ok {
				t.Fatalf("not the listening line: %q", first)
			}
			client, err := NewClient(url)
			if err != nil {
				t.Fatal(err)
			}
			node, err := NewNode(client, Owner{Region: "test"},
				NodeOptions{Push: &PushOptions{NodeID: "go-push-checked", Keys: tc.keys}})
			if err != nil {
				t.Fatal(err)
			}
			defer node.Shutdown(context.Background())
			rest, _ := io.ReadAll(lines)
			err = cmd.Wait()
			t.Logf("unique-node-check:\n%s%s", stdout.String(), rest)
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Fatalf("exit status %d (%v), want %d", code, err, tc.code)
			}
			out := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if got := out[len(out)-1]; got != tc.last {
				t.Fatalf("last line %q, want %q", got, tc.last)
			}
		})
	}
}
