//! The IPC bridge's bounds on connections, against the real binary: connections past the cap
//! are closed as they are accepted, idle ones are closed after `HEADER_TIMEOUT`, and one run
//! holds at most `MAX_RUN_CONNECTIONS` of its own bridge. (A review took the sidecar to its descriptor limit with 24,800 idle
//! connections: no cap, no header or idle timeout.)

use crate::common::{TEST_TIMEOUT, TempDir, TestRedis};
use crate::serving::Serving;
use ptc_sidecar::run::ipc::{HEADER_TIMEOUT, MAX_RUN_CONNECTIONS, loopback_cap};
use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Descriptors the process `pid` holds.
fn fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Whether the peer closed `stream` (a read returns end of file), waiting at most `wait`.
fn closed_by_peer(mut stream: &TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

#[tokio::test]
async fn idle_connections_are_capped_and_closed() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("bridge");
        let redis = TestRedis::any();
        let s = Serving::start(
            &dir,
            &redis,
            &[("PTC_WARM_WORKERS", "1"), ("PTC_MAX_RUNS", "4")],
        )
        .await;
        // Every run's share of four runs, and one share more.
        let cap = loopback_cap(MAX_RUN_CONNECTIONS, 4);
        // The loopback listener's port, as a run's SDK is told it.
        let (status, r) = s
            .exec("import ptc_sdk\nprint(ptc_sdk._client.port)")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status, 200, "{r}");
        let port: u16 = r["stdout"].as_str().unwrap().trim().parse().unwrap();
        let baseline = fds(s.pid);

        // More connections than the cap, sending nothing: each one past it takes the place of
        // the oldest no run has claimed, which is closed.
        let attempted = cap + 300;
        let held: Vec<TcpStream> = (0..attempted)
            .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
            .collect();
        assert_eq!(held.len(), attempted, "the kernel took every connection");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let open: Vec<bool> = held
            .iter()
            .map(|c| !closed_by_peer(c, Duration::from_millis(1)))
            .collect();
        let still_open = open.iter().filter(|o| **o).count();
        assert!(
            (cap - 8..=cap).contains(&still_open),
            "{still_open} of {attempted} idle connections stayed open (cap {cap})"
        );
        assert!(
            !open[0] && open[attempted - 1],
            "the oldest were closed, the newest kept"
        );
        let peak = fds(s.pid);
        assert!(
            peak <= baseline + cap + 64,
            "the sidecar holds {peak} descriptors (baseline {baseline})"
        );
        // Idle past the header timeout: closed by the sidecar.
        tokio::time::sleep(HEADER_TIMEOUT + Duration::from_secs(1)).await;
        let still = held
            .iter()
            .filter(|c| !closed_by_peer(c, Duration::from_millis(1)))
            .count();
        assert_eq!(still, 0, "idle connections outlived HEADER_TIMEOUT");
        drop(held);
        let settled = Instant::now() + Duration::from_secs(5);
        while fds(s.pid) > baseline + 8 && Instant::now() < settled {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(fds(s.pid) <= baseline + 8, "descriptors came back");

        // A run still runs, and calls its tools.
        let (status, r) = s
            .exec("print(await demo__add(a=2, b=3))")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((status, r["stdout"].as_str()), (200, Some("5\n")), "{r}");
    })
    .await
    .unwrap();
}

/// A run's own bridge (a network namespace of its own): at most MAX_RUN_CONNECTIONS served at
/// once, the others wait in the run's backlog; once the run closes them it goes on calling its
/// tools (no connection of its refused).
#[tokio::test]
async fn a_runs_bridge_is_its_own() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let dir = TempDir::new("bridge-run");
        let redis = TestRedis::any();
        let s = Serving::start(&dir, &redis, &[("PTC_WARM_WORKERS", "1")]).await;
        // Each held connection asks something (a request without a token: any answer will
        // do); only the ones the sidecar serves are answered.
        let code = format!(
            "import socket, time, ptc_sdk\n\
             held = []\n\
             for _ in range({n}):\n\
             \x20   c = socket.create_connection(('127.0.0.1', ptc_sdk._client.port))\n\
             \x20   c.sendall(b'POST /describe HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 2\\r\\n\\r\\n{{}}')\n\
             \x20   held.append(c)\n\
             time.sleep(1)\n\
             open_ = 0\n\
             for c in held:\n\
             \x20   c.setblocking(False)\n\
             \x20   try:\n\
             \x20       open_ += len(c.recv(4096)) > 0\n\
             \x20   except BlockingIOError:\n\
             \x20       pass\n\
             \x20   except OSError:\n\
             \x20       pass\n\
             print(open_)\n\
             for c in held:\n\
             \x20   c.close()\n\
             print(await demo__add(a=1, b=1))",
            n = MAX_RUN_CONNECTIONS * 2
        );
        let (status, r) = s.exec(&code).await.unwrap().unwrap();
        assert_eq!(status, 200, "{r}");
        let health: serde_json::Value = s
            .http
            .get(s.url("/healthz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let namespaced = health["sandbox"]["namespaces"]
            .as_array()
            .is_some_and(|n| n.iter().any(|v| v == "net"));
        let mut lines = r["stdout"].as_str().unwrap().lines();
        let served: usize = lines.next().unwrap().parse().unwrap();
        assert!(served > 0, "no connection was served: {r}");
        if namespaced {
            assert_eq!(
                served, MAX_RUN_CONNECTIONS,
                "{served} connections served at once by one run's bridge (cap {MAX_RUN_CONNECTIONS})"
            );
        }
        assert_eq!(
            lines.next(),
            Some("2"),
            "the run still calls its tools: {r}"
        );
    })
    .await
    .unwrap();
}
