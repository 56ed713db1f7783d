//! Reach: the control API, Redis, the host callback, any other address, and the IPC port on any
//! other address: the only door out of a run is its own end of the IPC bridge.

use super::stage::set_mode;
use super::{Opts, Stage, Verdict, against_both, attack, broken};
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
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

/// What a run tries to reach besides the bridge: a TCP and a UDP port of the harness and a
/// pathname Unix socket in the open folder (anyone may connect to it). Whatever arrives at any
/// of them is an attack that got through.
pub(super) struct Listeners {
    tcp: TcpListener,
    udp: std::net::UdpSocket,
    unix: std::os::unix::net::UnixListener,
    unix_path: std::path::PathBuf,
}

impl Listeners {
    /// Opens the three, the Unix socket as `name` in the stage's open folder.
    pub(super) fn open(s: &Stage, name: &str) -> Listeners {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let unix_path = s.open_dir.join(name);
        let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        unix.set_nonblocking(true).unwrap();
        set_mode(&unix_path, 0o777);
        Listeners {
            tcp,
            udp,
            unix,
            unix_path,
        }
    }

    /// The script's `ARGS`: where each listens, and the mark it sends.
    pub(super) fn args(&self, mark: &str) -> Value {
        json!({"tcp_port": self.tcp.local_addr().unwrap().port(),
               "udp_port": self.udp.local_addr().unwrap().port(),
               "unix_path": self.unix_path, "mark": mark})
    }

    /// An attack when anything arrived; the socket file is removed either way.
    pub(super) fn nothing_arrived(self) -> Verdict {
        let mut arrived = Vec::new();
        if self.tcp.accept().is_ok() {
            arrived.push("a TCP connection");
        }
        if self.udp.recv(&mut [0u8; 256]).is_ok() {
            arrived.push("a UDP datagram");
        }
        if self.unix.accept().is_ok() {
            arrived.push("a Unix connection");
        }
        drop(self.unix);
        let _ = std::fs::remove_file(&self.unix_path);
        if !arrived.is_empty() {
            return Err(attack(format!("{arrived:?} arrived")));
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_any_other_address_is_refused() {
    against_both("reach_anywhere", Opts::default(), |s| async move {
        let listeners = Listeners::open(&s, "escape.sock");
        let run = s.attack("reach_anywhere.py", listeners.args(&s.mark)).await;
        listeners.nothing_arrived()?;
        run?.all_refused(4)
    })
    .await;
}

/// Issue 21's "data leaves": Landlock's TCP rule is a port, not an address, and a run once
/// connected to `127.0.0.2:<IPC port>` (in a pod: any host listening on that port number) and
/// handed over its data. The harness listens on the sidecar's IPC port at other addresses:
/// other loopback addresses, IPv6's loopback, and this machine's addresses that are not
/// loopback. The run connects to each and sends data, and tries TCP Fast Open; each must be
/// refused, nothing may reach a listener, and the bridge itself must still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ipc_port_on_any_other_address_is_out_of_reach() {
    against_both(
        "reach_ipc_port_elsewhere",
        Opts::default(),
        |s| async move {
            let port = s.ipc.port();
            // Other loopback addresses, IPv6's, 127.0.0.2 as an IPv4-mapped IPv6 address (its
            // listener is 127.0.0.2's), and the outside ones.
            let mut addresses: Vec<IpAddr> = vec![
                IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(127, 1, 2, 3)),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                IpAddr::V6(Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped()),
            ];
            addresses.extend(outside_addresses());
            let listeners: Vec<(SocketAddr, TcpListener)> = addresses
                .iter()
                .filter_map(|ip| {
                    let addr = SocketAddr::new(*ip, port);
                    let l = TcpListener::bind(addr).ok()?;
                    l.set_nonblocking(true).ok()?;
                    Some((addr, l))
                })
                .collect();
            let listening: Vec<SocketAddr> = listeners.iter().map(|(a, _)| *a).collect();
            let loopback_2 = SocketAddr::new(addresses[0], port);
            if !listening.contains(&loopback_2) {
                return Err(broken(format!(
                    "the harness could not listen on {loopback_2} (listening on {listening:?})"
                )));
            }
            if !listening.iter().any(|a| !a.ip().is_loopback()) {
                eprintln!(
                    "reach_ipc_port_elsewhere: this machine has no outside address to listen on \
                     (listening on {listening:?})"
                );
            }
            let targets: Vec<(String, u16)> =
                addresses.iter().map(|ip| (ip.to_string(), port)).collect();
            let run = s
                .attack(
                    "reach_ipc_port_elsewhere.py",
                    json!({"targets": targets, "mark": s.mark}),
                )
                .await;
            let arrived: Vec<String> = listeners
                .iter()
                .filter_map(|(addr, l)| {
                    l.accept()
                        .ok()
                        .map(|(_, from)| format!("{addr} from {from}"))
                })
                .collect();
            if !arrived.is_empty() {
                return Err(attack(format!(
                    "connections reached the harness's listeners: {arrived:?}"
                )));
            }
            let run = run?;
            if run.said("BRIDGE") != Some("through the bridge") {
                return Err(broken(format!(
                    "the run's own bridge did not answer: {}\n{}",
                    run.stdout, run.stderr
                )));
            }
            run.all_refused(targets.len() + 1)
        },
    )
    .await;
}

/// This machine's addresses that are neither loopback nor link-local: where a run's data would
/// leave to if a connection to them worked.
fn outside_addresses() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list of its own, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return found;
    }
    let mut node = list;
    while !node.is_null() {
        // SAFETY: `node` is a node of the list getifaddrs made, not yet freed.
        let ifa = unsafe { &*node };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of the family it names.
            let ip = unsafe {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            };
            let link_local = |ip: &IpAddr| match ip {
                IpAddr::V4(v4) => v4.is_link_local(),
                IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
            };
            if let Some(ip) = ip
                && !ip.is_loopback()
                && !ip.is_unspecified()
                && !link_local(&ip)
                && !found.contains(&ip)
            {
                found.push(ip);
            }
        }
        node = ifa.ifa_next;
    }
    // SAFETY: the list getifaddrs made, freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}
