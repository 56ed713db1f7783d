//! Reach: the control API, Redis, the host callback, any other address: the only door out of a
//! run is the IPC bridge.

use super::stage::set_mode;
use super::{Opts, against_both, attack};
use serde_json::json;
use std::net::TcpListener;
use std::sync::atomic::Ordering;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_the_control_api_is_refused() {
    against_both("reach_control_api", Opts::default(), |s| async move {
        let run = s
            .attack(
                "reach_control_api.py",
                json!({"control": [s.addr.ip().to_string(), s.addr.port()], "api_key": s.secrets.api_key}),
            )
            .await?;
        run.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_redis_is_refused() {
    against_both("reach_redis", Opts::default(), |s| async move {
        let run = s
            .attack(
                "reach_redis.py",
                json!({"redis_port": s.redis.port, "redis_password": s.redis.password,
                       "agent_id": s.agent_id, "mark": s.mark}),
            )
            .await?;
        let stream = s.redis.stream(&format!("ptc:stream:{}", s.agent_id)).await;
        if stream.contains(&s.mark) {
            return Err(attack(format!("a forged event is in the stream: {stream}")));
        }
        run.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_the_host_callback_is_refused() {
    against_both("reach_callback", Opts::default(), |s| async move {
        let run = s
            .attack(
                "reach_callback.py",
                json!({"callback": [s.host.addr.ip().to_string(), s.host.addr.port(), "/tools"],
                       "callback_auth": s.secrets.callback_auth, "mark": s.mark}),
            )
            .await?;
        let calls = s.complete_calls.load(Ordering::SeqCst);
        if calls > 0 {
            return Err(attack(format!(
                "the direct tool complete was called {calls} time(s)"
            )));
        }
        run.all_refused(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_any_other_address_is_refused() {
    against_both("reach_anywhere", Opts::default(), |s| async move {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let unix_path = s.open_dir.join("escape.sock");
        let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        unix.set_nonblocking(true).unwrap();
        set_mode(&unix_path, 0o777);
        let run = s
            .attack(
                "reach_anywhere.py",
                json!({"tcp_port": tcp.local_addr().unwrap().port(),
                       "udp_port": udp.local_addr().unwrap().port(),
                       "unix_path": unix_path, "mark": s.mark}),
            )
            .await;
        let mut arrived = Vec::new();
        if tcp.accept().is_ok() {
            arrived.push("a TCP connection");
        }
        if udp.recv(&mut [0u8; 256]).is_ok() {
            arrived.push("a UDP datagram");
        }
        if unix.accept().is_ok() {
            arrived.push("a Unix connection");
        }
        drop(unix);
        let _ = std::fs::remove_file(&unix_path);
        if !arrived.is_empty() {
            return Err(attack(format!("{arrived:?} arrived")));
        }
        run?.all_refused(4)
    })
    .await;
}
