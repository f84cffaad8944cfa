//! The Lua scripts: each multi-step operation runs as one script, so Redis executes
//! it atomically (no other command interleaves).
//!
//! Numbers cross into Lua as strings and are compared with `tonumber` (exact for the
//! integers this crate allows, all below 2^53). Values that Lua computes are written
//! back with `string.format('%d', …)`, because Redis converts Lua numbers to strings
//! in a form that may use an exponent.

use std::sync::LazyLock;

use redis::Script;

/// `ensure_owner`.
///
/// KEYS: lease hash, epoch counter.
/// ARGV: node, now (ms), now + ttl (ms), new token, gc grace (ms).
/// Returns `{status, node, token, epoch, exp}` with status `0` held by another node
/// (nothing written), `1` renewed, `2` granted, `-1` corrupt record (nothing written).
pub(super) static ENSURE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and kind ~= 'hash' then
  return {-1, '', '', '', ''}
end
local node, now, want, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local cur = redis.call('HMGET', KEYS[1], 'node', 'token', 'epoch', 'exp')
if cur[1] or cur[2] or cur[3] or cur[4] then
  local exp = tonumber(cur[4])
  if not (cur[1] and cur[2] and cur[3] and exp) then
    return {-1, '', '', '', ''}
  end
  if exp > 0 and now < exp then
    if cur[1] ~= node then
      return {0, cur[1], cur[2], cur[3], cur[4]}
    end
    -- Renewal: same token and epoch; extend, never shorten.
    local keep = cur[4]
    if want > exp then
      keep = ARGV[3]
      redis.call('HSET', KEYS[1], 'exp', keep)
    end
    redis.call('PEXPIRE', KEYS[1], string.format('%d', tonumber(keep) - now + grace))
    return {1, cur[1], cur[2], cur[3], keep}
  end
end
-- No lease, or an expired one: a new holding. The counter key has no TTL, so an
-- epoch is never issued twice, whatever happened to the lease key.
local epoch = string.format('%d', redis.call('INCR', KEYS[2]))
redis.call('HSET', KEYS[1], 'node', node, 'token', ARGV[4], 'epoch', epoch, 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], string.format('%d', want - now + grace))
return {2, node, ARGV[4], epoch, ARGV[3]}
",
    )
});

/// `release_owner`.
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

/// `register_node`: replaces whatever the key held.
///
/// KEYS: node hash. ARGV: address, updated (ms), expires (ms), ttl (ms).
pub(super) static REGISTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'addr', ARGV[1], 'updated', ARGV[2], 'exp', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
",
    )
});
