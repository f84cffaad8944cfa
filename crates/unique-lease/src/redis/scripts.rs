//! The Lua scripts: each operation runs as one script, so Redis executes it
//! atomically (no other command interleaves) and judges time with its own `TIME`.
//!
//! Numbers cross into Lua as strings and are compared with `tonumber` (exact for the
//! integers this crate allows, all below 2^53). Values that Lua computes are written
//! back with `string.format('%d', …)`, because Redis converts Lua numbers to strings
//! in a form that may use an exponent.
//!
//! Every script's last ARGV is the clock: `-1` means Redis's `TIME` (production);
//! a number is the time in ms a test clock gave ([`RedisDirectoryBuilder::clock`](super::RedisDirectoryBuilder::clock)).
//! Since Redis 5 scripts replicate their effects, so reading `TIME` before writing is
//! allowed.

use std::sync::LazyLock;

use redis::Script;

/// Lua: `now` in ms from the clock argument `ARGV[i]`.
const NOW: &str = r"
local function clock_ms(arg)
  local given = tonumber(arg)
  if given >= 0 then return given end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
";

fn script(body: &str) -> Script {
    Script::new(&format!("{NOW}{body}"))
}

/// Lua: the D11 rules of `unique_lease::rules` on Redis's clock. `steps(i)` reads the
/// four arguments from `ARGV[i]`: the reading the caller's monotonic clock predicts (`-1`
/// none), the tolerance, and the last forward step's reading and monotonic ms since it
/// (`-1` none); a reading beyond the prediction by more than the tolerance is a step
/// seen now. `left(exp, ttl)` is what a row has left at `now` (`ttl` nil for a row an
/// older build wrote: its expiry alone).
const STEPS: &str = r"
local now, tol, step_wall, step_elapsed
local function steps(i, clock)
  now = clock_ms(clock)
  local expected = tonumber(ARGV[i])
  tol, step_wall, step_elapsed = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  if expected >= 0 and now > expected + tol then
    step_wall, step_elapsed = now, 0
  end
end
local function left(exp, ttl)
  local by_clock = exp - now
  if by_clock < 0 then by_clock = 0 end
  if not ttl then return by_clock end
  local l = math.min(by_clock, ttl)
  if step_wall >= 0 and exp - ttl + tol < step_wall and ttl - step_elapsed > l then
    l = ttl - step_elapsed
  end
  return l
end
";

fn stepped(body: &str) -> Script {
    Script::new(&format!("{NOW}{STEPS}{body}"))
}

/// `read_lease`.
///
/// KEYS: lease hash. ARGV: clock, then the four step arguments.
/// Returns `{status, node, token, epoch, left, now}`: status `0` no lease, `1` found
/// (`left` in ms, zero once expired), `-1` corrupt; `now` the clock's reading.
pub(super) static READ: LazyLock<Script> = LazyLock::new(|| {
    stepped(
        r"
steps(2, ARGV[1])
local t = string.format('%d', now)
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {0, '', '', '', '0', t} end
if kind ~= 'hash' then return {-1, '', '', '', '0', t} end
local cur = redis.call('HMGET', KEYS[1], 'node', 'token', 'epoch', 'exp', 'ttl')
local exp = tonumber(cur[4])
if not (cur[1] and cur[2] and cur[3] and exp) then return {-1, '', '', '', '0', t} end
return {1, cur[1], cur[2], cur[3], string.format('%d', left(exp, tonumber(cur[5]))), t}
",
    )
});

/// `ensure_lease`.
///
/// KEYS: lease hash, epoch counter.
/// ARGV: node, ttl (ms), new token, gc grace (ms), clock, then the four step arguments.
/// Returns `{status, node, token, epoch, left, now}` with status `0` held by another node,
/// `1` renewed, `2` granted, `-1` corrupt record (nothing written); `now` the clock's
/// reading. A row in force whose expiry a step moved is rewritten in the clock's current
/// frame, token and epoch kept (D11).
pub(super) static ENSURE: LazyLock<Script> = LazyLock::new(|| {
    stepped(
        r"
steps(6, ARGV[5])
local t = string.format('%d', now)
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return {-1, '', '', '', '0', t}
end
local node, ttl, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local want = now + ttl
local cur = redis.call('HMGET', KEYS[1], 'node', 'token', 'epoch', 'exp', 'ttl')
if cur[1] or cur[2] or cur[3] or cur[4] then
  local exp = tonumber(cur[4])
  if not (cur[1] and cur[2] and cur[3] and exp) then
    return {-1, '', '', '', '0', t}
  end
  local l = left(exp, tonumber(cur[5]))
  if l > 0 then
    local status, keep = 0, now + l
    if cur[1] == node then
      status = 1
      -- Renewal: same token and epoch; extend, never shorten.
      if want > keep then
        keep = want
        redis.call('HSET', KEYS[1], 'ttl', ARGV[2])
      end
    end
    if keep ~= exp then
      redis.call('HSET', KEYS[1], 'exp', string.format('%d', keep))
    end
    if status == 1 or keep ~= exp then
      redis.call('PEXPIRE', KEYS[1], string.format('%d', keep - now + grace))
    end
    return {status, cur[1], cur[2], cur[3], string.format('%d', keep - now), t}
  end
end
-- No lease, or an expired one: a new holding. The counter key has no TTL, so an
-- epoch is never issued twice, whatever happened to the lease key.
local epoch = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('HSET', KEYS[1], 'node', node, 'token', ARGV[3], 'epoch', epoch,
  'exp', string.format('%d', want), 'ttl', ARGV[2])
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl + grace))
return {2, node, ARGV[3], epoch, ARGV[2], t}
",
    )
});

/// `release_lease`.
///
/// KEYS: lease hash. ARGV: node, token.
/// Returns `1` deleted, `0` not the holder (node and token) or no lease, `-1` corrupt
/// (wrong type).
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return 0 end
if kind ~= 'hash' then return -1 end
local held = redis.call('HMGET', KEYS[1], 'node', 'token')
if held[1] == ARGV[1] and held[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
",
    )
});

/// `write_node`: replaces whatever the key held.
///
/// KEYS: node hash. ARGV: address, ttl (ms), clock.
pub(super) static REGISTER: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local now, ttl = clock_ms(ARGV[3]), tonumber(ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'addr', ARGV[1], 'updated', string.format('%d', now),
  'exp', string.format('%d', now + ttl))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
",
    )
});

/// `read_node`.
///
/// KEYS: node hash. ARGV: clock.
/// Returns `{status, addr, age, left}`: `0` none or expired, `1` valid, `-1` corrupt.
pub(super) static READ_NODE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {0, '', '0', '0'} end
if kind ~= 'hash' then return {-1, '', '0', '0'} end
local cur = redis.call('HMGET', KEYS[1], 'addr', 'updated', 'exp')
local updated, exp = tonumber(cur[2]), tonumber(cur[3])
if not (cur[1] and updated and exp) then return {-1, '', '0', '0'} end
local now = clock_ms(ARGV[1])
if now >= exp then return {0, '', '0', '0'} end
local age = now - updated
if age < 0 then age = 0 end
return {1, cur[1], string.format('%d', age), string.format('%d', exp - now)}
",
    )
});
