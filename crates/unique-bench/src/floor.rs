//! The HTTP floor: a server that does no work at all, to show what any HTTP server costs on
//! this machine before it arbitrates anything.
//!
//! `unique-bench --serve-floor` (the bench starts it as its own process, so its CPU is counted
//! like a server's) reads each request head and body and writes one canned claim answer, the
//! same bytes `unique-server` writes for a first login. Its runtime has one worker, like
//! `unique-server --workers 1`. No routing, no JSON, no store, no metrics: only the loopback TCP,
//! the request framing and the scheduler. A target's server CPU per claim minus the floor's is
//! what its own work costs; the floor's throughput is a ceiling no server reaches on this
//! machine with this client.

use std::io::Write as _;
use std::process::ExitCode;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A first login's answer, as `unique-server` writes it (the date is fixed: nobody reads it).
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 108\r\ndate: Tue, 01 Dec 2026 05:53:22 GMT\r\n\r\n{\"gen\":1,\"prev_gen\":0,\"has_prev\":false,\"prev_owner\":null,\"kicked\":false,\"kick_detail\":null,\"replayed\":false}";

/// Runs the floor server until the process is killed; prints the line `unique-server` prints,
/// so the bench starts both the same way.
pub(crate) fn serve() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("unique-bench --serve-floor: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let listener = match TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("unique-bench --serve-floor: cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        };
        let Ok(addr) = listener.local_addr() else {
            return ExitCode::FAILURE;
        };
        println!("unique-server listening on http://{addr}");
        let _ = std::io::stdout().flush();
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(stream));
            }
        }
    })
}

/// Answers every complete request on `stream`, in order, until the client closes it.
async fn connection(mut stream: TcpStream) {
    let mut buf = vec![0_u8; 8192];
    let mut filled = 0;
    loop {
        match stream.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => filled += n,
        }
        while let Some(len) = request_len(&buf[..filled]) {
            if stream.write_all(ANSWER).await.is_err() {
                return;
            }
            buf.copy_within(len..filled, 0);
            filled -= len;
        }
        if filled == buf.len() {
            return; // a request larger than the buffer: not the bench's
        }
    }
}

/// The length of the first complete request (head and `content-length` body) in `buf`.
fn request_len(buf: &[u8]) -> Option<usize> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut request = httparse::Request::new(&mut headers);
    let httparse::Status::Complete(head) = request.parse(buf).ok()? else {
        return None;
    };
    let body = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| {
            std::str::from_utf8(h.value)
                .ok()?
                .trim()
                .parse::<usize>()
                .ok()
        })
        .unwrap_or(0);
    (buf.len() >= head + body).then_some(head + body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canned_answer_frames_like_unique_servers() {
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut response = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(head) = response.parse(ANSWER).unwrap() else {
            panic!("incomplete head");
        };
        assert_eq!(response.code, Some(200));
        assert_eq!(ANSWER.len() - head, 108, "content-length matches the body");
        assert!(ANSWER[head..].starts_with(br#"{"gen":"#));
    }

    #[test]
    fn requests_are_framed_by_head_and_content_length() {
        let one = b"POST /v1/claim HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(request_len(one), Some(one.len()));
        assert_eq!(request_len(&one[..one.len() - 1]), None);
        let two = [&one[..], &one[..]].concat();
        assert_eq!(request_len(&two), Some(one.len()));
        assert_eq!(request_len(b"GET / HTTP/1.1\r\n\r\n"), Some(18));
    }
}
