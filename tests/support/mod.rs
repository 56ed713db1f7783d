//! What the integration tests and the benchmarks share, included by both with `#[path]`: a
//! free port, a Redis of their own, the saved catalogs of a corpus directory, and the process
//! table (`procs`).
//!
//! Must stay free of anything only one of them uses (the test harness is `tests/all/common.rs`,
//! the benchmarks' setup is in each bench).

#![allow(dead_code)]

pub mod jwt;
pub mod procs;
pub mod synthetic;

use ptc_sidecar::sources::SavedCatalog;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long `redis-server` gets to accept connections before the caller gives up.
const REDIS_START_TIMEOUT: Duration = Duration::from_secs(10);

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Every `NAME.json` in a directory as MCP server NAME, by name (the corpus layout).
pub fn saved_catalogs_in(dir: &Path) -> Vec<SavedCatalog> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the corpus {}: {e}", dir.display()));
    let mut saved: Vec<SavedCatalog> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|path| {
            let server = path.file_stem()?.to_string_lossy().into_owned();
            Some(SavedCatalog { server, path })
        })
        .collect();
    saved.sort_by(|a, b| a.server.cmp(&b.server));
    saved
}

/// A Redis: `REDIS_URL` when set (for [`TestRedis::any`]), else a `redis-server` of our own on
/// a free port, keeping nothing on disk unless made durable, stopped on drop.
pub struct TestRedis {
    pub url: String,
    port: u16,
    child: Option<Child>,
    /// Its working directory, removed on drop (only for our own server).
    dir: Option<PathBuf>,
    /// Every write in its append-only file, synced before it answers: a SIGKILL loses nothing
    /// it acknowledged, and a restart in the same directory has it all.
    durable: bool,
}

impl TestRedis {
    /// The configured Redis (`REDIS_URL`), or our own.
    pub fn any() -> TestRedis {
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.is_empty() => TestRedis {
                url,
                port: 0,
                child: None,
                dir: None,
                durable: false,
            },
            _ => TestRedis::own(),
        }
    }

    /// Always our own (a test that stops and restarts it).
    pub fn own() -> TestRedis {
        TestRedis::try_own().expect("redis-server is installed (scripts/test installs it)")
    }

    /// Our own, keeping every acknowledged write across a SIGKILL and a restart (a test that
    /// kills it and checks what it holds afterwards).
    pub fn own_durable() -> TestRedis {
        TestRedis::try_start_own(true)
            .expect("redis-server is installed (scripts/test installs it)")
    }

    /// Our own, or `None` when `redis-server` cannot be started (a benchmark then skips).
    pub fn try_own() -> Option<TestRedis> {
        TestRedis::try_start_own(false)
    }

    /// `redis-server` cannot be told port 0 (that turns TCP off), so a port found free may be
    /// taken before it binds it: then it exits, and another port is tried.
    fn try_start_own(durable: bool) -> Option<TestRedis> {
        /// Ports tried before giving up.
        const ATTEMPTS: usize = 5;
        static N: AtomicUsize = AtomicUsize::new(0);
        for _ in 0..ATTEMPTS {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "ptc-redis-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).ok()?;
            let mut r = TestRedis {
                url: format!("redis://127.0.0.1:{port}/0"),
                port,
                child: None,
                dir: Some(dir),
                durable,
            };
            if r.try_start() {
                return Some(r);
            }
        }
        None
    }

    /// Starts our own server again after [`TestRedis::stop`], on the same port.
    pub fn start(&mut self) {
        assert!(self.try_start(), "redis-server could not be started");
    }

    fn try_start(&mut self) -> bool {
        let Some(dir) = &self.dir else {
            return false;
        };
        let Ok(child) = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(match self.durable {
                true => ["--appendonly", "yes", "--appendfsync", "always"].as_slice(),
                false => ["--appendonly", "no"].as_slice(),
            })
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
        else {
            return false;
        };
        let mut child = child;
        let deadline = Instant::now() + REDIS_START_TIMEOUT;
        loop {
            // Exited: it could not bind (the port was taken meanwhile) or not start at all.
            if !matches!(child.try_wait(), Ok(None)) {
                return false;
            }
            // Something answers: ours only if it says our child's pid.
            if let Some(pid) = redis_pid(self.port) {
                if pid == child.id() {
                    break;
                }
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
        true
    }

    /// The process id of our own server while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills our own server with SIGKILL (no shutdown of its own: nothing saved, connections
    /// cut) and reaps it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .expect("a valid Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("Redis accepts a connection")
    }

    /// Every event in `agent`'s stream (`ptc:stream:<agent>`), oldest first, as JSON.
    pub async fn stream_events(
        &self,
        conn: &mut redis::aio::MultiplexedConnection,
        agent: &str,
    ) -> Vec<serde_json::Value> {
        let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
            .arg(format!("ptc:stream:{agent}"))
            .arg("-")
            .arg("+")
            .query_async(conn)
            .await
            .expect("XRANGE of the agent's stream");
        reply
            .ids
            .iter()
            .map(|e| {
                let json: String = e.get("event").expect("an entry has its event");
                serde_json::from_str(&json).expect("an event is JSON")
            })
            .collect()
    }
}

/// The `process_id` of the Redis answering on `port`, or `None` when nothing answers (yet).
fn redis_pid(port: u16) -> Option<u32> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        // The whole line only: a read may end in the middle of the number.
        if let Some((_, rest)) = text.split_once("process_id:")
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.trim().parse().ok();
        }
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        self.stop();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
