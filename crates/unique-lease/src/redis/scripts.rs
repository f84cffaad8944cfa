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

/// `read_lease`.
///
/// KEYS: lease hash. ARGV: clock.
/// Returns `{status, node, token, epoch, left}`: status `0` no lease, `1` found
/// (`left` in ms, zero once expired), `-1` corrupt.
pub(super) static READ: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {0, '', '', '', '0'} end
if kind ~= 'hash' then return {-1, '', '', '', '0'} end
local cur = redis.call('HMGET', KEYS[1], 'node', 'token', 'epoch', 'exp')
local exp = tonumber(cur[4])
if not (cur[1] and cur[2] and cur[3] and exp) then return {-1, '', '', '', '0'} end
local left = exp - clock_ms(ARGV[1])
if left < 0 then left = 0 end
return {1, cur[1], cur[2], cur[3], string.format('%d', left)}
",
    )
});

/// `ensure_lease`.
///
/// KEYS: lease hash, epoch counter.
/// ARGV: node, ttl (ms), new token, gc grace (ms), clock.
/// Returns `{status, node, token, epoch, left}` with status `0` held by another node
/// (nothing written), `1` renewed, `2` granted, `-1` corrupt record (nothing written).
pub(super) static ENSURE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return {-1, '', '', '', '0'}
end
local node, ttl, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local now = clock_ms(ARGV[5])
local want = now + ttl
local cur = redis.call('HMGET', KEYS[1], 'node', 'token', 'epoch', 'exp')
if cur[1] or cur[2] or cur[3] or cur[4] then
  local exp = tonumber(cur[4])
  if not (cur[1] and cur[2] and cur[3] and exp) then
    return {-1, '', '', '', '0'}
  end
  if now < exp then
    if cur[1] ~= node then
      return {0, cur[1], cur[2], cur[3], string.format('%d', exp - now)}
    end
    -- Renewal: same token and epoch; extend, never shorten.
    local keep = exp
    if want > exp then
      keep = want
      redis.call('HSET', KEYS[1], 'exp', string.format('%d', keep))
    end
    redis.call('PEXPIRE', KEYS[1], string.format('%d', keep - now + grace))
    return {1, cur[1], cur[2], cur[3], string.format('%d', keep - now)}
  end
end
-- No lease, or an expired one: a new holding. The counter key has no TTL, so an
-- epoch is never issued twice, whatever happened to the lease key.
local epoch = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('HSET', KEYS[1], 'node', node, 'token', ARGV[3], 'epoch', epoch,
  'exp', string.format('%d', want))
redis.call('PEXPIRE', KEYS[1], string.format('%d', ttl + grace))
return {2, node, ARGV[3], epoch, ARGV[2]}
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
