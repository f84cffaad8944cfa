// A kick's payload, read as the Rust and Go receivers read it.

/** A session's key: one session per (project, env, uid, slot). */
export interface Key {
  project: string;
  env: string;
  /** A user id, 1 to 2^63 - 1 (a bigint: JavaScript numbers stop being exact at 2^53). */
  uid: bigint;
  /** The device slot; "" is the default slot. */
  slot: string;
}

/** The kick reasons the server sends: a takeover, and an operator's logout. */
export const REASON_LOGIN_ELSEWHERE = "login-elsewhere";
export const REASON_ADMIN = "admin";

/** A kick: the key whose session must yield, the gen it yields to, and why. */
export interface Kick extends Key {
  /** Only a local session with an older gen ends (I6). */
  gen: bigint;
  /** login-elsewhere, admin, or a name this client does not know ("" when not a string). */
  reason: string;
  /** The text for the user (an admin's reason); "" when none. */
  message: string;
}

/** The largest kick body a receiver takes (4 KiB); a kick is well under 600 bytes. */
export const MAX_KICK_BODY_BYTES = 4096;

/** The most bytes of a kick's message or reason kept: 256 characters at 4 bytes each. */
const MAX_CAUSE_BYTES = 4 * 256;

/** The default limit on a project, env or slot, in characters. */
const MAX_TENANT_CHARS = 64;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** A malformed or invalid kick: answered 400 `invalid_params`. */
export class KickError extends Error {}

/** The string a key is stored under in a map. */
export function keyId(key: Key): string {
  return JSON.stringify([key.project, key.env, key.uid.toString(), key.slot]);
}

/**
 * Reads a kick payload: project, env, uid and gen are required (uid and gen JSON integers
 * within int64, no fraction or exponent), slot is a string when present; a missing or null
 * reason reads as login-elsewhere and one that is not a string as ""; a message that is not a
 * string as none; any other field is ignored. The key is validated as the server validates it.
 */
export function decodeKick(body: Buffer): Kick {
  let fields: Map<string, Json>;
  try {
    const value = new JsonReader(new TextDecoder("utf-8", { fatal: true }).decode(body)).document();
    if (!(value instanceof Map)) {
      throw new KickError("not a JSON object");
    }
    fields = value;
  } catch (e) {
    throw new KickError(`malformed kick: ${(e as Error).message}`);
  }
  const field = (name: string): Json => {
    if (!fields.has(name)) {
      throw new KickError(`malformed kick: missing field \`${name}\``);
    }
    return fields.get(name) as Json;
  };
  const string = (name: string, value: Json): string => {
    if (typeof value !== "string") {
      throw new KickError(`malformed kick: ${name}: not a string`);
    }
    return value;
  };
  const integer = (name: string, value: Json): bigint => {
    if (!(value instanceof RawNumber) || !/^-?[0-9]+$/.test(value.raw)) {
      throw new KickError(`malformed kick: ${name}: not an integer`);
    }
    const n = BigInt(value.raw);
    if (n < INT64_MIN || n > INT64_MAX) {
      throw new KickError(`malformed kick: ${name}: not an integer`);
    }
    return n;
  };
  const project = string("project", field("project"));
  const env = string("env", field("env"));
  const uid = integer("uid", field("uid"));
  const gen = integer("gen", field("gen"));
  const slot = fields.has("slot") ? string("slot", fields.get("slot") as Json) : "";
  let reason = REASON_LOGIN_ELSEWHERE;
  const rawReason = fields.get("reason");
  if (rawReason !== undefined && rawReason !== null) {
    reason = typeof rawReason === "string" ? bounded(rawReason) : "";
  }
  const rawMessage = fields.get("message");
  const message = typeof rawMessage === "string" ? bounded(rawMessage) : "";
  checkKey({ project, env, uid, slot });
  return { project, env, uid, slot, gen, reason, message };
}

/** The server's key validation with the default limits. */
export function checkKey(key: Key): void {
  checkTenantPart("project", key.project);
  checkTenantPart("env", key.env);
  if (key.uid < 1n) {
    throw new KickError("uid must be >= 1");
  }
  if (key.slot !== "" && !isPlace(key.slot)) {
    checkTenantPart("slot", key.slot);
  }
}

/**
 * Whether `slot` is a place of a user's pool (docs/design.md "Pooled sessions"): `#` and an
 * index below 1000 in decimal without a leading zero, the one slot with a `#` a kick may name.
 */
export function isPlace(slot: string): boolean {
  return /^#(0|[1-9][0-9]{0,2})$/.test(slot);
}

/** The slot of place `index` of a pool: `#0`, `#1`, ... */
export function placeSlot(index: number): string {
  return `#${index}`;
}

function checkTenantPart(name: string, value: string): void {
  if (value === "") {
    throw new KickError(`${name} must not be empty`);
  }
  if ([...value].length > MAX_TENANT_CHARS) {
    throw new KickError(`${name} must be at most ${MAX_TENANT_CHARS} characters`);
  }
  if (value.includes("#")) {
    throw new KickError(`${name} must not contain '#'`);
  }
  if (/[\u0000-\u001f\u007f-\u009f]/.test(value)) {
    throw new KickError(`${name} must not contain control characters`);
  }
}

/** Cuts text to MAX_CAUSE_BYTES of UTF-8 at a character boundary. */
function bounded(text: string): string {
  const bytes = Buffer.from(text, "utf8");
  if (bytes.length <= MAX_CAUSE_BYTES) {
    return text;
  }
  let end = MAX_CAUSE_BYTES;
  while (end > 0 && ((bytes[end] as number) & 0xc0) === 0x80) {
    end--;
  }
  return bytes.subarray(0, end).toString("utf8");
}

/** A JSON number as written, so an int64 stays exact. */
class RawNumber {
  constructor(readonly raw: string) {}
}

type Json = null | boolean | string | RawNumber | Json[] | Map<string, Json>;

/** A strict JSON reader (RFC 8259) that keeps numbers as written. */
class JsonReader {
  #at = 0;
  constructor(readonly text: string) {}

  document(): Json {
    const value = this.value();
    this.space();
    if (this.#at !== this.text.length) {
      throw new Error(`trailing characters at ${this.#at}`);
    }
    return value;
  }

  space(): void {
    while (/[ \t\n\r]/.test(this.text[this.#at] ?? "")) {
      this.#at++;
    }
  }

  value(): Json {
    this.space();
    const c = this.text[this.#at];
    if (c === "{") {
      return this.object();
    }
    if (c === "[") {
      return this.array();
    }
    if (c === '"') {
      return this.string();
    }
    for (const [word, value] of [["true", true], ["false", false], ["null", null]] as const) {
      if (this.text.startsWith(word, this.#at)) {
        this.#at += word.length;
        return value;
      }
    }
    const number = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/.exec(this.text.slice(this.#at));
    if (number === null) {
      throw new Error(`unexpected character at ${this.#at}`);
    }
    this.#at += number[0].length;
    return new RawNumber(number[0]);
  }

  object(): Map<string, Json> {
    const map = new Map<string, Json>();
    this.#at++;
    this.space();
    if (this.text[this.#at] === "}") {
      this.#at++;
      return map;
    }
    for (;;) {
      this.space();
      if (this.text[this.#at] !== '"') {
        throw new Error(`expected a field name at ${this.#at}`);
      }
      const name = this.string();
      this.space();
      this.expect(":");
      map.set(name, this.value());
      this.space();
      if (this.text[this.#at] === ",") {
        this.#at++;
        continue;
      }
      this.expect("}");
      return map;
    }
  }

  array(): Json[] {
    const items: Json[] = [];
    this.#at++;
    this.space();
    if (this.text[this.#at] === "]") {
      this.#at++;
      return items;
    }
    for (;;) {
      items.push(this.value());
      this.space();
      if (this.text[this.#at] === ",") {
        this.#at++;
        continue;
      }
      this.expect("]");
      return items;
    }
  }

  string(): string {
    const match = /^"(?:[^"\\\u0000-\u001f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/.exec(this.text.slice(this.#at));
    if (match === null) {
      throw new Error(`malformed string at ${this.#at}`);
    }
    this.#at += match[0].length;
    return JSON.parse(match[0]) as string;
  }

  expect(c: string): void {
    if (this.text[this.#at] !== c) {
      throw new Error(`expected '${c}' at ${this.#at}`);
    }
    this.#at++;
  }
}
