//! The Redis baseline: the claim as one Lua script (`EVALSHA`), over one
//! connection per worker, spoken in RESP through the same lean transport as the
//! HTTP client ([`crate::conn`]).

use std::net::SocketAddr;

use crate::conn::Conn;
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
#[derive(Debug, Clone)]
pub(crate) struct RedisConnector {
    addr: SocketAddr,
}

impl RedisConnector {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Self { addr }
    }
}

impl Connector for RedisConnector {
    type Client = RedisConnection;

    async fn connect(&self) -> Result<RedisConnection, Failure> {
        let mut conn = Conn::connect(self.addr).await?;
        // SCRIPT LOAD answers with the script's SHA1, which EVALSHA then names.
        write_command(
            &mut conn.request,
            &[b"SCRIPT", b"LOAD", CLAIM_SCRIPT.as_bytes()],
        );
        let (answer, ()) = conn.exchange(frame_reply).await?;
        let sha = match parse_reply(answer) {
            Reply::Bulk(sha) => sha.to_vec(),
            other => return Err(Failure::broken(format!("SCRIPT LOAD: {other:?}"))),
        };
        Ok(RedisConnection {
            conn,
            sha,
            key: Vec::with_capacity(32),
        })
    }
}

/// One connection and the loaded script's SHA1.
pub(crate) struct RedisConnection {
    conn: Conn,
    sha: Vec<u8>,
    key: Vec<u8>,
}

impl Client for RedisConnection {
    async fn claim(&mut self, claim: Claim<'_>) -> Result<(), Failure> {
        use std::io::Write as _;
        self.key.clear();
        let _ = write!(self.key, "bench#prod#{}", claim.uid);
        write_command(
            &mut self.conn.request,
            &[
                b"EVALSHA",
                &self.sha,
                b"1",
                &self.key,
                claim.claim_id.as_bytes(),
                OWNER.as_bytes(),
            ],
        );
        let (answer, ()) = self.conn.exchange(frame_reply).await?;
        match parse_reply(answer) {
            Reply::Integer(generation) if generation >= 1 => Ok(()),
            Reply::Integer(_) => Err(Failure::answer("redis gen below 1")),
            Reply::Error(message) => Err(Failure::answer(format!(
                "redis {}",
                message.split(' ').next().unwrap_or_default()
            ))),
            Reply::Bulk(_) => Err(Failure::answer("redis unexpected bulk reply")),
        }
    }
}

/// One field of `INFO <section>` (e.g. `used_memory` of `memory`), read over a
/// connection of its own.
pub(crate) async fn info_field(
    addr: SocketAddr,
    section: &str,
    field: &str,
) -> Result<u64, Failure> {
    let mut conn = Conn::connect(addr).await?;
    write_command(&mut conn.request, &[b"INFO", section.as_bytes()]);
    let (answer, ()) = conn.exchange(frame_reply).await?;
    let Reply::Bulk(text) = parse_reply(answer) else {
        return Err(Failure::broken(format!("INFO {section}: not a bulk reply")));
    };
    info_value(text, field).ok_or_else(|| Failure::broken(format!("INFO {section}: no {field}")))
}

/// `CONFIG SET name value`, over a connection of its own.
pub(crate) async fn config_set(addr: SocketAddr, name: &str, value: &str) -> Result<(), Failure> {
    let mut conn = Conn::connect(addr).await?;
    write_command(
        &mut conn.request,
        &[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()],
    );
    let (answer, ()) = conn.exchange(frame_reply).await?;
    match answer {
        b"+OK\r\n" => Ok(()),
        other => Err(Failure::broken(format!(
            "CONFIG SET {name}: {}",
            String::from_utf8_lossy(other).trim()
        ))),
    }
}

/// The value of `field:<number>` among the lines of an `INFO` answer.
fn info_value(text: &[u8], field: &str) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

/// A command as a RESP array of bulk strings.
fn write_command(out: &mut Vec<u8>, parts: &[&[u8]]) {
    use std::io::Write as _;
    let _ = write!(out, "*{}\r\n", parts.len());
    for part in parts {
        let _ = write!(out, "${}\r\n", part.len());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
}

/// The replies the bench meets: an integer (the script's gen), an error, or a
/// bulk string (SCRIPT LOAD's SHA1).
#[derive(Debug, PartialEq, Eq)]
enum Reply<'a> {
    Integer(i64),
    Error(&'a str),
    Bulk(&'a [u8]),
}

/// Frames one reply of the kinds in [`Reply`]; other kinds break the connection.
fn frame_reply(input: &[u8]) -> Result<Option<(usize, ())>, Failure> {
    let Some(line_end) = input.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let length = match input[0] {
        b':' | b'-' | b'+' => line_end + 2,
        b'$' => {
            let size: usize = std::str::from_utf8(&input[1..line_end])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Failure::broken("redis: bad bulk length"))?;
            line_end + 2 + size + 2
        }
        other => {
            return Err(Failure::broken(format!(
                "redis: unexpected reply type {:?}",
                char::from(other)
            )));
        }
    };
    Ok((input.len() >= length).then_some((length, ())))
}

/// Reads a reply that [`frame_reply`] found whole.
fn parse_reply(reply: &[u8]) -> Reply<'_> {
    let line = &reply[1..reply.len() - 2];
    match reply[0] {
        b':' => std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(Reply::Error("bad integer reply"), Reply::Integer),
        b'-' => Reply::Error(std::str::from_utf8(line).unwrap_or("non-utf8 error")),
        b'$' => {
            let start = line
                .iter()
                .position(|&b| b == b'\n')
                .map_or(line.len(), |at| at + 1);
            Reply::Bulk(&line[start..])
        }
        _ => Reply::Error("unexpected reply"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        write_command(&mut out, &[b"EVALSHA", b"ab", b"1"]);
        assert_eq!(out, b"*3\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n");
    }

    #[test]
    fn replies_are_framed_and_read() {
        for (whole, reply) in [
            (&b":42\r\n"[..], Reply::Integer(42)),
            (
                b"-NOSCRIPT No matching script\r\n",
                Reply::Error("NOSCRIPT No matching script"),
            ),
            (b"$3\r\nabc\r\n", Reply::Bulk(b"abc")),
        ] {
            for cut in 1..whole.len() {
                assert_eq!(
                    frame_reply(&whole[..cut]).unwrap(),
                    None,
                    "{whole:?} cut at {cut}"
                );
            }
            let mut more = whole.to_vec();
            more.extend_from_slice(b":1\r\n");
            assert_eq!(frame_reply(&more).unwrap(), Some((whole.len(), ())));
            assert_eq!(parse_reply(whole), reply);
        }
        assert!(frame_reply(b"*1\r\n:1\r\n").unwrap_err().broken);
    }

    #[test]
    fn info_fields_are_found_by_whole_name() {
        let text =
            b"# Memory\r\nused_memory_human:1.2M\r\nused_memory:1234\r\nused_memory_rss:99\r\n";
        assert_eq!(info_value(text, "used_memory"), Some(1234));
        assert_eq!(info_value(text, "used_memory_rss"), Some(99));
        assert_eq!(info_value(text, "used"), None);
    }

    /// The script against a real redis-server: first claim gen 1, a replay the
    /// same gen, a new claim_id gen 2.
    #[tokio::test]
    async fn script_claims_and_replays_on_a_real_server() {
        let server = unique_testsupport::redis::RedisServer::start();
        let mut client = RedisConnector::new(server.addr()).connect().await.unwrap();
        let claim = |claim_id| Claim { uid: 7, claim_id };
        client.claim(claim("a")).await.unwrap();
        client.claim(claim("a")).await.unwrap();
        client.claim(claim("b")).await.unwrap();
        let mut conn = Conn::connect(server.addr()).await.unwrap();
        write_command(&mut conn.request, &[b"HGET", b"bench#prod#7", b"gen"]);
        let (answer, ()) = conn.exchange(frame_reply).await.unwrap();
        assert_eq!(parse_reply(answer), Reply::Bulk(b"2"));
        let used = info_field(server.addr(), "memory", "used_memory")
            .await
            .unwrap();
        assert!(used > 0);
        config_set(server.addr(), "hash-max-listpack-value", "128")
            .await
            .unwrap();
        assert!(
            config_set(server.addr(), "no-such-setting", "1")
                .await
                .is_err()
        );
    }
}
