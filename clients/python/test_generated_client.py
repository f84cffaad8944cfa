"""The Python client openapi-python-client generates from docs/openapi.yaml, against the real
unique-server: every operation once, and every documented error status of the claim route
parsed into its typed model.

`cargo xtask openapi` generates the client (warnings fail it) and runs this file with the
generated package on PYTHONPATH. The server is UNIQUE_SERVER_BIN, else the workspace's cargo
build, on a free loopback port.
"""

import http.server
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import unittest
import uuid

from unique_client import AuthenticatedClient, Client
from unique_client.api.default import (
    claim,
    current,
    current_batch,
    health,
    health_head,
    lease_ensure,
    lease_lookup,
    lease_release,
    lease_verify,
    logout,
    logout_all,
    node_deregister,
    node_kick_ack,
    node_lookup,
    node_register,
    ready,
    ready_head,
    release,
    sessions,
)
from unique_client.models import (
    BatchRequest,
    ClaimAnswer,
    ClaimRequest,
    CurrentView,
    ForbiddenError,
    InvalidParamsError,
    KeyRequest,
    LeaseEnsureRequest,
    LeaseRoomRequest,
    LeaseTokenRequest,
    LogoutAllAnswer,
    LogoutAllRequest,
    LogoutRequest,
    EndpointOwnerRequest,
    KickAckAnswer,
    KickAckRequest,
    NodeKeyRequest,
    NodeOwnerRequest,
    NodeRegisterRequest,
    ReleaseRequest,
    SupersededError,
    ThrottledError,
    TooLargeError,
    TooManySlotsError,
    UnauthenticatedError,
    UnavailableError,
    UserRequest,
)

WORKSPACE = pathlib.Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "py-client-test-token-admin-0123456789"
OTHER_TOKEN = "py-client-test-token-other-0123456789"
PROJECT = "py"
NOWHERE = "http://127.0.0.1:9/kick"
# A tight line and deadline give 429 and 503 honest causes: no claim may wait behind the one
# in progress on a key, and a claim whose kick hangs passes its 2 s deadline.
FLAGS = ["--max-slots-per-user", "2", "--max-queued-claims", "0", "--claim-timeout", "2s", "--kick-timeout", "30s"]


def server_binary():
    given = os.environ.get("UNIQUE_SERVER_BIN")
    if given:
        return given
    subprocess.run(["cargo", "build", "--quiet", "-p", "unique-server", "--bin", "unique-server"], cwd=WORKSPACE, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    return str(WORKSPACE / target / "debug" / "unique-server")


class Server:
    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="unique-py-test-")
        tokens = pathlib.Path(self.dir.name, "tokens.json")
        tokens.write_text(json.dumps({"tokens": [
            {"name": "admin", "token": ADMIN_TOKEN, "projects": [PROJECT], "roles": ["admin"]},
            {"name": "other", "token": OTHER_TOKEN, "projects": ["elsewhere"]},
        ]}))
        tokens.chmod(0o600)
        env = dict(os.environ, RUST_LOG="warn")
        self.process = subprocess.Popen(
            [server_binary(), "--listen", "127.0.0.1:0", "--store", "memory", "--auth-tokens", str(tokens), *FLAGS],
            stdout=subprocess.PIPE, env=env, text=True)
        line = self.process.stdout.readline()
        announce = "unique-server listening on "
        if not line.startswith(announce):
            self.process.kill()
            raise RuntimeError(f"unique-server did not start: {line!r}")
        self.url = line[len(announce):].strip()

    def stop(self):
        self.process.terminate()
        self.process.wait()
        self.dir.cleanup()


def claim_request(uid, endpoint=NOWHERE, claim_id=None, slot=None):
    request = ClaimRequest(project=PROJECT, env="prod", uid=uid, owner=EndpointOwnerRequest(endpoint=endpoint),
                           claim_id=claim_id or str(uuid.uuid4()))
    if slot is not None:
        request.slot = slot
    return request


_uids = iter(range(1, 1 << 62))


def fresh_uid():
    return next(_uids)


class GeneratedClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = AuthenticatedClient(base_url=cls.server.url, token=ADMIN_TOKEN, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_every_operation_once(self):
        uid = fresh_uid()
        key = KeyRequest(project=PROJECT, env="prod", uid=uid)
        claimed = claim.sync_detailed(client=self.client, body=claim_request(uid))
        self.assertEqual(claimed.status_code, 200, claimed.content)
        self.assertIsInstance(claimed.parsed, ClaimAnswer)
        gen = claimed.parsed.gen
        view = current.sync(client=self.client, body=key)
        self.assertIsInstance(view, CurrentView)
        self.assertEqual((view.gen, view.owner.endpoint), (gen, NOWHERE))
        other = KeyRequest(project=PROJECT, env="prod", uid=fresh_uid())
        batch = current_batch.sync(client=self.client, body=BatchRequest(keys=[key, other]))
        self.assertEqual([v.gen for v in batch.views], [gen, 0])
        self.assertTrue(all(isinstance(v, CurrentView) for v in batch.views))
        listed = sessions.sync(client=self.client, body=UserRequest(project=PROJECT, env="prod", uid=uid, limit=10))
        self.assertEqual([(s.slot, s.gen) for s in listed.sessions], [("", gen)])
        released = release.sync(client=self.client, body=ReleaseRequest(project=PROJECT, env="prod", uid=uid, gen=gen))
        self.assertTrue(released.released)
        again = claim.sync(client=self.client, body=claim_request(uid))
        out = logout.sync(client=self.client, body=LogoutRequest(project=PROJECT, env="prod", uid=uid, reason="closed"))
        self.assertEqual((out.released, out.gen, out.kick_detail), (True, again.gen, "connect-error"))
        on_slot = claim.sync(client=self.client, body=claim_request(uid, slot="mobile"))
        everywhere = logout_all.sync(client=self.client, body=LogoutAllRequest(project=PROJECT, env="prod", uid=uid, reason="closed"))
        self.assertIsInstance(everywhere, LogoutAllAnswer)
        self.assertEqual([(s.slot, s.released, s.gen) for s in everywhere.sessions], [("mobile", True, on_slot.gen)])

        room = f"room-{uid}"
        lease = lease_ensure.sync(client=self.client, body=LeaseEnsureRequest(project=PROJECT, room=room, node="a", ttl_ms=60000))
        self.assertEqual(lease.node, "a")
        token = LeaseTokenRequest(project=PROJECT, room=room, node="a", token=lease.token)
        self.assertTrue(lease_verify.sync(client=self.client, body=token).valid)
        self.assertEqual(lease_lookup.sync(client=self.client, body=LeaseRoomRequest(project=PROJECT, room=room)).lease.token, lease.token)
        self.assertTrue(lease_release.sync(client=self.client, body=token).released)
        node = f"node-{uid}"
        registered = node_register.sync(client=self.client, body=NodeRegisterRequest(project=PROJECT, node=node, addr="127.0.0.1:9001", ttl_ms=60000))
        self.assertEqual(registered.addr, "127.0.0.1:9001")
        self.assertEqual(node_lookup.sync(client=self.client, body=NodeKeyRequest(project=PROJECT, node=node)).node.addr, "127.0.0.1:9001")
        self.assertTrue(node_deregister.sync(client=self.client, body=NodeKeyRequest(project=PROJECT, node=node)).removed)
        # Push kicks: an owner naming a node, and an ack no kick waits for (the stream itself,
        # GET /v1/nodes/{node_id}/kicks, never ends: unique-server's tests read it).
        pushed = ClaimRequest(project=PROJECT, env="prod", uid=fresh_uid(), owner=NodeOwnerRequest(node=node),
                              claim_id=str(uuid.uuid4()))
        self.assertEqual(claim.sync(client=self.client, body=pushed).gen, 1)
        ack = node_kick_ack.sync(node_id=node, client=self.client, body=KickAckRequest(id="0" * 32, status=200))
        self.assertIsInstance(ack, KickAckAnswer)
        self.assertFalse(ack.accepted)

        anonymous = Client(base_url=self.server.url)
        self.assertEqual(str(health.sync(client=anonymous)), "ok")
        self.assertEqual(str(ready.sync(client=anonymous)), "ok")
        self.assertEqual(health_head.sync_detailed(client=anonymous).status_code, 200)
        self.assertEqual(ready_head.sync_detailed(client=anonymous).status_code, 200)

    def test_claim_errors_400_401_403_409_413(self):
        uid = fresh_uid()
        invalid = claim_request(uid)
        invalid.uid = 0
        answer = claim.sync_detailed(client=self.client, body=invalid)
        self.assertEqual(answer.status_code, 400)
        self.assertIsInstance(answer.parsed, InvalidParamsError)
        self.assertIn("uid", answer.parsed.message)

        answer = claim.sync_detailed(client=Client(base_url=self.server.url), body=claim_request(uid))
        self.assertEqual(answer.status_code, 401)
        self.assertIsInstance(answer.parsed, UnauthenticatedError)

        outside = AuthenticatedClient(base_url=self.server.url, token=OTHER_TOKEN)
        answer = claim.sync_detailed(client=outside, body=claim_request(uid))
        self.assertEqual(answer.status_code, 403)
        self.assertIsInstance(answer.parsed, ForbiddenError)

        first_id = str(uuid.uuid4())
        first = claim.sync(client=self.client, body=claim_request(uid, claim_id=first_id))
        second = claim.sync(client=self.client, body=claim_request(uid))
        answer = claim.sync_detailed(client=self.client, body=claim_request(uid, claim_id=first_id))
        self.assertEqual(answer.status_code, 409)
        self.assertIsInstance(answer.parsed, SupersededError)
        self.assertEqual((answer.parsed.gen, answer.parsed.current_gen), (first.gen, second.gen))

        claim.sync(client=self.client, body=claim_request(uid, slot="phone"))
        answer = claim.sync_detailed(client=self.client, body=claim_request(uid, slot="tablet"))
        self.assertEqual(answer.status_code, 409)
        self.assertIsInstance(answer.parsed, TooManySlotsError)
        self.assertEqual(answer.parsed.limit, 2)

        answer = claim.sync_detailed(client=self.client, body=claim_request(uid, claim_id="x" * 70000))
        self.assertEqual(answer.status_code, 413)
        self.assertIsInstance(answer.parsed, TooLargeError)

    def test_claim_errors_429_503(self):
        # The old session's receiver holds the kick until the claim that sent it has its
        # answer: that claim is in progress all along (another claim on the key is 429), and
        # it passes its deadline while the kick hangs (503).
        kicked, answered = threading.Event(), threading.Event()

        class Hanging(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                kicked.set()
                answered.wait(60)
                body = b'{"ack":"destroyed"}'
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server gave up on the kick at the claim's deadline

            def log_message(self, *args):
                pass

        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hanging)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        try:
            uid = fresh_uid()
            endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/kick"
            self.assertEqual(claim.sync_detailed(client=self.client, body=claim_request(uid, endpoint)).status_code, 200)
            takeover = {}
            thread = threading.Thread(target=lambda: takeover.update(answer=claim.sync_detailed(client=self.client, body=claim_request(uid))))
            thread.start()
            self.assertTrue(kicked.wait(60), "the takeover's kick never arrived")
            answer = claim.sync_detailed(client=self.client, body=claim_request(uid))
            self.assertEqual(answer.status_code, 429)
            self.assertIsInstance(answer.parsed, ThrottledError)
            thread.join(60)
            answered.set()
            late = takeover["answer"]
            self.assertEqual(late.status_code, 503)
            self.assertIsInstance(late.parsed, UnavailableError)
        finally:
            answered.set()
            receiver.shutdown()
            receiver.server_close()


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed or not result.testsRun else 0)
