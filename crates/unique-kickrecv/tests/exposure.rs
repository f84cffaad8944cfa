//! Secure by default: a receiver that does not verify signatures refuses to listen on an
//! address that is not loopback, unless told `insecure_unsigned_kicks()`. The listeners bind
//! `0.0.0.0:0` (every interface, on a free port); the traffic goes to 127.0.0.1 only.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use unique_client::{KickHandler, KickOptions};
use unique_core::Key;
use unique_kick_signature::SigningKeys;
use unique_kickrecv::{KickReceiver, KickService, ServeOptions, serve, serve_with};

const KEY: &str = "exposure-test-key-0123456789abcdef0123";
const KICK: &str = r#"{"project":"game","env":"prod","uid":42,"gen":2}"#;

fn handler() -> KickHandler {
    KickHandler::new(|_: &Key| None, |_: Key, _| async {}, KickOptions::default())
}

fn keys() -> SigningKeys {
    SigningKeys::new([KEY]).unwrap()
}

async fn everywhere() -> TcpListener {
    TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).await.unwrap()
}

async fn loopback() -> TcpListener {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap()
}

/// The same port on 127.0.0.1: where a receiver bound to `0.0.0.0` is reached from here.
fn on_loopback(addr: SocketAddr) -> SocketAddr {
    (Ipv4Addr::LOCALHOST, addr.port()).into()
}

/// POSTs the kick (signed with `keys` when given) to `addr`: the status.
async fn kick(addr: SocketAddr, keys: Option<&SigningKeys>) -> u16 {
    let signature = keys.map_or_else(String::new, |k| {
        format!(
            "unique-signature: {}\r\n",
            k.sign(KICK.as_bytes(), SystemTime::now())
        )
    });
    let raw = format!(
        "POST /kick HTTP/1.1\r\nhost: x\r\n{signature}content-length: {}\r\nconnection: close\r\n\r\n{KICK}",
        KICK.len()
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8(answer).unwrap()[9..12].parse().unwrap()
}

/// The refusal: `InvalidInput`, naming the address and both ways out.
fn assert_refused(error: &io::Error, addr: SocketAddr) {
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}");
    let message = error.to_string();
    assert!(message.contains(&addr.to_string()), "{message}");
    assert!(message.contains("signing_keys"), "{message}");
    assert!(message.contains("insecure_unsigned_kicks()"), "{message}");
}

#[tokio::test]
async fn an_unsigned_receiver_on_every_interface_refuses_to_start() {
    let listener = everywhere().await;
    let addr = listener.local_addr().unwrap();
    let error = KickReceiver::builder(handler())
        .spawn(listener)
        .unwrap_err();
    assert_refused(&error, addr);
    assert!(
        error
            .to_string()
            .starts_with(&format!("refusing to serve unsigned kicks on {addr}: ")),
        "{error}"
    );
    // Nothing is served: the listener was dropped with the refusal.
    assert!(TcpStream::connect(on_loopback(addr)).await.is_err());
}

#[tokio::test]
async fn a_signed_receiver_on_every_interface_starts_and_verifies() {
    let listener = everywhere().await;
    let receiver = KickReceiver::builder(handler())
        .signing_keys(keys())
        .spawn(listener)
        .unwrap();
    let addr = on_loopback(receiver.local_addr());
    assert_eq!(kick(addr, Some(&keys())).await, 200);
    assert_eq!(kick(addr, None).await, 401);
    receiver.close().await;
}

#[tokio::test]
async fn a_service_with_keys_passes_the_builder_check_too() {
    let listener = everywhere().await;
    let service = KickService::new(handler()).signing_keys(keys());
    let receiver = KickReceiver::builder(service).spawn(listener).unwrap();
    assert_eq!(
        kick(on_loopback(receiver.local_addr()), Some(&keys())).await,
        200
    );
    receiver.close().await;
}

#[tokio::test]
async fn insecure_unsigned_kicks_starts_on_every_interface() {
    let listener = everywhere().await;
    let receiver = KickReceiver::builder(handler())
        .insecure_unsigned_kicks()
        .spawn(listener)
        .unwrap();
    assert_eq!(kick(on_loopback(receiver.local_addr()), None).await, 200);
    receiver.close().await;

    // Said on the service instead of the builder.
    let service = KickService::new(handler()).insecure_unsigned_kicks();
    let receiver = KickReceiver::builder(service)
        .spawn(everywhere().await)
        .unwrap();
    assert_eq!(kick(on_loopback(receiver.local_addr()), None).await, 200);
    receiver.close().await;
}

#[tokio::test]
async fn an_unsigned_receiver_on_loopback_starts() {
    let receiver = KickReceiver::builder(handler())
        .spawn(loopback().await)
        .unwrap();
    assert_eq!(kick(receiver.local_addr(), None).await, 200);
    receiver.close().await;
}

#[tokio::test]
async fn spawn_layered_checks_the_service_before_wrapping_it() {
    let listener = everywhere().await;
    let addr = listener.local_addr().unwrap();
    let mut wrapped = false;
    let error = KickReceiver::builder(handler())
        .spawn_layered(listener, |kicks| {
            wrapped = true;
            kicks
        })
        .unwrap_err();
    assert_refused(&error, addr);
    assert!(!wrapped, "refused before wrapping");

    let receiver = KickReceiver::builder(handler())
        .signing_keys(keys())
        .options(ServeOptions::default())
        .spawn_layered(everywhere().await, |kicks| kicks)
        .unwrap();
    assert_eq!(
        kick(on_loopback(receiver.local_addr()), Some(&keys())).await,
        200
    );
    receiver.close().await;
}

#[tokio::test]
async fn spawn_of_any_service_serves_loopback_only() {
    // It cannot see inside a wrapper, so even a service with keys is refused off loopback.
    let listener = everywhere().await;
    let addr = listener.local_addr().unwrap();
    let service = KickService::new(handler()).signing_keys(keys());
    let error = KickReceiver::spawn(listener, service, ServeOptions::default()).unwrap_err();
    assert_refused(&error, addr);
    assert!(error.to_string().contains("spawn_layered"), "{error}");

    let service = KickService::new(handler());
    let receiver = KickReceiver::spawn(loopback().await, service, ServeOptions::default()).unwrap();
    assert_eq!(kick(receiver.local_addr(), None).await, 200);
    receiver.close().await;
}

/// The error of a `serve` that must refuse before serving: without the check it would serve
/// until the test ends, so it is bounded.
async fn refused_at_once(serving: impl Future<Output = io::Result<()>>) -> io::Error {
    tokio::time::timeout(Duration::from_secs(10), serving)
        .await
        .expect("it served instead of refusing")
        .unwrap_err()
}

#[tokio::test]
async fn serve_and_serve_with_refuse_unsigned_kicks_on_every_interface() {
    let listener = everywhere().await;
    let addr = listener.local_addr().unwrap();
    let error = refused_at_once(serve(listener, handler(), std::future::pending())).await;
    assert_refused(&error, addr);

    let listener = everywhere().await;
    let addr = listener.local_addr().unwrap();
    let error = refused_at_once(serve_with(
        listener,
        handler(),
        ServeOptions::default(),
        std::future::pending(),
    ))
    .await;
    assert_refused(&error, addr);

    // With keys it serves (until the shutdown future completes).
    let listener = everywhere().await;
    let addr = on_loopback(listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve_with(
        listener,
        KickService::new(handler()).signing_keys(keys()),
        ServeOptions::default(),
        async {
            let _ = stopped.await;
        },
    ));
    assert_eq!(kick(addr, Some(&keys())).await, 200);
    stop.send(()).unwrap();
    served.await.unwrap().unwrap();
}

#[test]
fn check_exposure_knows_loopback_from_every_interface() {
    let unsigned = KickService::new(handler());
    let signed = KickService::new(handler()).signing_keys(keys());
    let insecure = KickService::new(handler()).insecure_unsigned_kicks();
    assert!(!unsigned.verifies_signatures());
    assert!(signed.verifies_signatures());
    assert!(!insecure.verifies_signatures());
    for (addr, loopback) in [
        ("127.0.0.1:9001", true),
        ("127.0.0.2:9001", true),
        ("[::1]:9001", true),
        ("[::ffff:127.0.0.1]:9001", true),
        ("0.0.0.0:9001", false),
        ("[::]:9001", false),
        ("10.0.0.7:9001", false),
        ("192.168.1.20:9001", false),
        ("[fd00::1]:9001", false),
        ("[::ffff:10.0.0.7]:9001", false),
    ] {
        let addr: SocketAddr = addr.parse().unwrap();
        let checked = unsigned.check_exposure(addr);
        assert_eq!(checked.is_ok(), loopback, "{addr}: {checked:?}");
        if let Err(error) = checked {
            assert_refused(&error, addr);
        }
        assert!(signed.check_exposure(addr).is_ok(), "{addr}");
        assert!(insecure.check_exposure(addr).is_ok(), "{addr}");
    }
}
