//! The Redis baseline: the claim as one Lua script, over one connection per worker.

use redis::aio::MultiplexedConnection;
use redis::{Client as RedisClient, Script};

use crate::load::{Claim, Client, Connector, Failure, OWNER};

/// The claim a Redis user would write: read gen and cid, compare (same cid = a
/// replay, answered with the stored gen), else bump gen and write owner and cid.
/// Returns the gen.
const CLAIM_SCRIPT: &str = r"
local cur = redis.call('HMGET', KEYS[1], 'gen', 'cid')
if cur[2] == ARGV[1] then
  return tonumber(cur[1])
end
local gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'cid', ARGV[1])
return gen
";

/// Opens connections to one redis-server.
#[derive(Clone)]
pub(crate) struct RedisConnector {
    client: RedisClient,
    script: Script,
}

impl RedisConnector {
    pub(crate) fn new(url: &str) -> Result<Self, String> {
        let client = RedisClient::open(url).map_err(|e| format!("bad redis url: {e}"))?;
        Ok(Self {
            client,
            script: Script::new(CLAIM_SCRIPT),
        })
    }
}

impl Connector for RedisConnector {
    type Client = RedisConnection;

    async fn connect(&self) -> Result<RedisConnection, Failure> {
        // A multiplexed connection is one TCP connection; each worker owns its own
        // and keeps one request in flight, exactly like the HTTP workers.
        let connection = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| Failure::broken(format!("redis connect: {:?}", e.kind())))?;
        Ok(RedisConnection {
            connection,
            script: self.script.clone(),
            key: String::with_capacity(32),
        })
    }
}

/// One connection and the script.
pub(crate) struct RedisConnection {
    connection: MultiplexedConnection,
    script: Script,
    key: String,
}

impl Client for RedisConnection {
    async fn claim(&mut self, claim: Claim<'_>) -> Result<(), Failure> {
        use std::fmt::Write as _;
        self.key.clear();
        let _ = write!(self.key, "bench#prod#{}", claim.uid);
        let generation: i64 = self
            .script
            .key(&self.key)
            .arg(claim.claim_id)
            .arg(OWNER)
            .invoke_async(&mut self.connection)
            .await
            .map_err(|e| {
                let kind = format!("redis {:?}", e.kind());
                if e.is_io_error() || e.is_connection_dropped() {
                    Failure::broken(kind)
                } else {
                    Failure::answer(kind)
                }
            })?;
        if generation >= 1 {
            Ok(())
        } else {
            Err(Failure::answer("redis gen below 1"))
        }
    }
}
