//! The attacks in JavaScript (`lang: "javascript"`): the same walls must hold for node as for
//! Python and bash, as root and as the unprivileged sidecar. Each script of `tests/escape/*.mjs`
//! runs after `const ARGS = {...}`, the JavaScript prelude (`_prelude.mjs`: `attempt`,
//! `checkpoint`) and a first checkpoint, as one ES module.

use super::script::Run;
use super::stage::StageInner;
use super::{Opts, Verdict, against_both, attack, broken};
use serde_json::{Value, json};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;

fn escape_script(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/escape")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The code of a JavaScript run of `script`. A script's own `import`s go first: an ES module
/// takes them anywhere, and they are hoisted all the same.
fn js_code(script: &str, args: &Value) -> String {
    format!(
        "const ARGS = {args};\n{}\nawait checkpoint();\n{}",
        escape_script("_prelude.mjs"),
        escape_script(script)
    )
}

async fn attack_js(s: &Arc<StageInner>, script: &str, args: Value) -> Result<Run, super::Failure> {
    s.attack_body(json!({"code": js_code(script, &args), "lang": "javascript"}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaching_any_other_address_from_javascript_is_refused() {
    against_both(
        "javascript_reach_anywhere",
        Opts::default(),
        |s| async move {
            let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
            tcp.set_nonblocking(true).unwrap();
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.set_nonblocking(true).unwrap();
            let unix_path = s.open_dir.join("escape-js.sock");
            let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
            unix.set_nonblocking(true).unwrap();
            std::fs::set_permissions(
                &unix_path,
                std::os::unix::fs::PermissionsExt::from_mode(0o777),
            )
            .unwrap();
            let args = json!({"tcp_port": tcp.local_addr().unwrap().port(),
                          "udp_port": udp.local_addr().unwrap().port(),
                          "unix_path": unix_path, "mark": s.mark});
            let run = attack_js(&s, "reach_anywhere.mjs", args).await;
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
            let run = run?;
            if run.status() != "ok" {
                return Err(broken(format!("{}\n{}", run.stdout, run.stderr)));
            }
            run.all_refused(5)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_outside_scratch_are_out_of_reach_of_javascript() {
    against_both(
        "javascript_outside_scratch",
        Opts::default(),
        |s| async move {
            let args = json!({"tmp_target": s.tmp_target, "open_dir": s.open_dir, "mark": s.mark,
                          "runtime_dir": s.dir.0.join("runtime"), "sidecar_pid": s.pid});
            let run = attack_js(&s, "persist_outside_scratch.mjs", args).await?;
            let verdict: Verdict = match run.stdout.contains("SCRATCH_WRITE fine") {
                true => Ok(()),
                false => Err(broken(format!("writing in scratch failed: {}", run.stdout))),
            };
            verdict?;
            run.all_refused(6)
        },
    )
    .await;
}
