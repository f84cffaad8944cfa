// The shared signed-kick test vector (docs/kick-signature-vector.json), checked here as the
// Rust and Go tests check it, and each way a signature is refused.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { SigningKeys } from "../src/index.js";
import { WORKSPACE } from "./support.js";

interface Vector {
  key: string;
  timestamp: number;
  body: string;
  header: string;
  key_id: string;
}

const vector = JSON.parse(readFileSync(join(WORKSPACE, "docs", "kick-signature-vector.json"), "utf8")) as Vector;
const body = Buffer.from(vector.body);
const other = "another-key-that-is-at-least-32-bytes-long";

test("the shared vector: the header, the key id, and the signature verifies", () => {
  const keys = new SigningKeys([vector.key]);
  assert.equal(keys.sign(body, vector.timestamp), vector.header);
  assert.deepEqual(keys.keyIds(), [vector.key_id]);
  assert.equal(keys.verify(vector.header, body, vector.timestamp), undefined);
  assert.equal(String(keys), "SigningKeys{count: 1}");
});

test("rotation: a signature by any key verifies, the first key signs", () => {
  const rotated = new SigningKeys([other, vector.key]);
  assert.equal(rotated.verify(vector.header, body, vector.timestamp), undefined);
  assert.notEqual(rotated.sign(body, vector.timestamp), vector.header);
  assert.equal(new SigningKeys([other]).verify(vector.header, body, vector.timestamp), "bad");
});

test("the window: 300 s either way, the boundary inside; authenticity first", () => {
  const keys = new SigningKeys([vector.key]);
  const t = vector.timestamp;
  assert.equal(keys.verify(vector.header, body, t + 300), undefined);
  assert.equal(keys.verify(vector.header, body, t + 301), "stale");
  assert.equal(keys.verify(vector.header, body, t - 300), undefined);
  assert.equal(keys.verify(vector.header, body, t - 301), "future");
  assert.equal(keys.verify(vector.header, body, t + 10, 5), "stale");
  // A forged signature out of the window is "bad", never "stale".
  assert.equal(new SigningKeys([other]).verify(vector.header, body, t + 1000), "bad");
});

test("refusals: missing, malformed, forged, over other bytes", () => {
  const keys = new SigningKeys([vector.key]);
  const t = vector.timestamp;
  const v1 = vector.header.split(",v1=")[1] as string;
  assert.equal(keys.verify(undefined, body, t), "missing");
  for (const header of [
    "",
    "garbage",
    `t=${t}`,
    `v1=${v1}`,
    `t=${t},t=${t},v1=${v1}`,
    `t=-1,v1=${v1}`,
    `t=${t},v1=${v1.slice(1)}`,
    `t=${t},v1=${"zz".repeat(32)}`,
    `t=${"1".repeat(21)},v1=${v1}`,
    `t=${t},v1=${v1}\u00e9`,
    `t=${t},${Array.from({ length: 9 }, () => `v1=${v1}`).join(",")}`,
  ]) {
    assert.equal(keys.verify(header, body, t), "malformed", header);
  }
  assert.equal(keys.verify(vector.header, Buffer.from(vector.body + " "), t), "bad");
  // Other schemes are ignored, whitespace around entries trimmed, any v1 may match.
  assert.equal(keys.verify(` t=${t} , v0=abc, v1=${"0".repeat(64)}, v1=${v1}`, body, t), undefined);
});

test("key files: one key a line, comments and blank lines skipped, short keys refused by line", () => {
  const keys = SigningKeys.parse(`# current\n\n  ${vector.key}  \n${other}\n`);
  assert.equal(keys.length, 2);
  assert.deepEqual(keys.keyIds()[0], vector.key_id);
  assert.throws(() => SigningKeys.parse(`# c\nshort\n`), /line 2 is shorter than 32 bytes/);
  assert.throws(() => SigningKeys.parse("# nothing\n"), /no signing key given/);
});
