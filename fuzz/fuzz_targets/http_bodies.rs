//! Any bytes as the body of a POST to the control API's run endpoints and, with a forged token,
//! to the IPC bridge's routes, of one real sidecar started once per fuzzing process (python3
//! runs what parses as code, within `PTC_TIMEOUT=1`). Never a 5xx, never a connection closed
//! without an answer. The first byte of an input picks the route; the rest is the body.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ptc_sidecar::app::{self, Listener, Sidecar};
use ptc_sidecar::config::{Config, Listen};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

/// The control API's routes that take a body from a runtime.
const CONTROL: [&str; 5] = [
    "/v1/exec_code",
    "/v1/exec/r0/results",
    "/exec/programmatic",
    "/exec/programmatic/cancel",
    "/exec",
];
/// The IPC bridge's routes, which a forged token must not get past.
const IPC: [&str; 6] = [
    "/call",
    "/tool_call",
    "/bash/x",
    "/file?name=a",
    "/search",
    "/describe",
];
/// Longest wait for one answer: a run is capped at 1 s, a refusal is immediate.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The control API's and the IPC bridge's addresses of the sidecar this process started.
fn sidecar() -> &'static (SocketAddr, SocketAddr) {
    static ADDRS: OnceLock<(SocketAddr, SocketAddr)> = OnceLock::new();
    ADDRS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
            runtime.block_on(async move {
                let vars = [
                    ("PTC_ENABLED", "true"),
                    ("PTC_WARM_WORKERS", "1"),
                    ("PTC_TIMEOUT", "1"),
                ];
                // What a sidecar inherits, then ours (the last value of a name wins).
                let inherited = ["PATH", "HOME", "TMPDIR"]
                    .into_iter()
                    .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)));
                let given = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
                let mut config = Config::from_vars(inherited.chain(given)).expect("config");
                config.listen = Listen::Tcp("127.0.0.1:0".parse().expect("an address"));
                let sidecar = Sidecar::start(config, &[])
                    .await
                    .expect("the sidecar starts");
                let listen = Listen::Tcp("127.0.0.1:0".parse().expect("an address"));
                let listener = Listener::bind(&listen).await.expect("a port");
                let control = listener.local_addr().parse().expect("a TCP address");
                let ipc = sidecar.state.runner.as_ref().expect("PTC is on").ipc_addr();
                tx.send((control, ipc)).expect("the fuzzer waits");
                let _ = app::run(listener, sidecar.state.clone(), sidecar.shutdown.clone()).await;
            });
        });
        rx.recv().expect("the sidecar started")
    })
}

/// POSTs `body` to `path` at `addr`; the answer's status code.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).expect("the sidecar listens");
    stream
        .set_read_timeout(Some(ANSWER_WITHIN))
        .expect("a timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: fuzz\r\nAuthorization: Bearer forged\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream
        .write_all(head.as_bytes())
        .expect("the request is sent");
    stream.write_all(body).expect("the body is sent");
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .expect("an answer within the wait");
    let line = String::from_utf8_lossy(&answer[..answer.len().min(16)]).into_owned();
    line.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {line:?}"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let &(control, ipc) = sidecar();
    let pick = usize::from(pick) % (CONTROL.len() + IPC.len());
    let (addr, path) = match CONTROL.get(pick) {
        Some(path) => (control, *path),
        None => (ipc, IPC[pick - CONTROL.len()]),
    };
    let status = post(addr, path, body);
    assert!(status < 500, "{path} answered {status}");
    if addr == ipc {
        assert_eq!(status, 401, "{path} let a forged token through");
    }
});
