//! Issue 35's attacks on what runs share (`src/run/budget.rs`): the clock through an approval
//! kept waiting for good, the approval table and the bytes it keeps, the IPC bridge's
//! connections. Each test judges from outside: the attacker's wall time, what
//! `GET /v1/approvals` holds, the sidecar's memory, and a victim run whose calls must answer,
//! its latency within 2× of an idle sidecar's (or 300 ms more, whichever is larger: these runs
//! take tens of milliseconds, and this machine is shared).

use super::stage::StageInner;
use super::{Failure, Opts, Verdict, against_both, attack, broken};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The run's own time and its share of waiting for people, in the clock attack.
const TIMEOUT_SECS: u64 = 3;
const APPROVAL_SECS: u64 = 4;

/// A victim run: one gathered batch of plain calls, its latency.
pub(super) async fn victim(s: &StageInner, calls: usize) -> Result<Duration, Failure> {
    let code = format!(
        "r = await asyncio.gather(*[echo(text=str(i)) for i in range({calls})])\n\
         print(len(r), r[-1]['text'])"
    );
    let started = Instant::now();
    let r = s
        .exec(&code)
        .await
        .map_err(|e| attack(format!("the victim's run got no answer: {e}")))?;
    let took = started.elapsed();
    let want = format!("{calls} {}\n", calls - 1);
    if r["status"] != "ok" || r["stdout"] != want.as_str() {
        return Err(attack(format!("the victim's calls failed: {r}")));
    }
    Ok(took)
}

/// The median of three victim runs.
pub(super) async fn victim_median(s: &StageInner, calls: usize) -> Result<Duration, Failure> {
    let mut took = Vec::new();
    for _ in 0..3 {
        took.push(victim(s, calls).await?);
    }
    took.sort();
    Ok(took[1])
}

/// A victim slowed past 2× of idle (and past idle + 300 ms) is an attack that got through.
pub(super) fn check_victim(idle: Duration, under: Duration, what: &str) -> Verdict {
    let bound = (idle * 2).max(idle + Duration::from_millis(300));
    if under > bound {
        return Err(attack(format!(
            "{what}: a victim run took {under:?}, {idle:?} on an idle sidecar (bound {bound:?})"
        )));
    }
    eprintln!("{what}: victim {under:?} under attack, {idle:?} idle");
    Ok(())
}

/// A number of a process's `/proc/<pid>/status` (`field` with its colon), 0 when unreadable.
pub(super) fn status_field(pid: i32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The sidecar's resident memory, KiB.
pub(super) fn rss_kib(pid: i32) -> u64 {
    status_field(pid, "VmRSS:")
}

/// The sidecar's open descriptors.
pub(super) fn descriptors_of(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// How often the sidecar refused a run past its share of `resource`, from `/metrics`.
pub(super) async fn share_refusals(s: &StageInner, resource: &str) -> Result<u64, Failure> {
    let text = s.get_text("/metrics").await?;
    let label = format!("resource=\"{resource}\"");
    Ok(text
        .lines()
        .find(|l| l.starts_with("ptc_run_share_refusals_total") && l.contains(&label))
        .and_then(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .map_or(0, |n| n as u64))
}

/// The runs' calls waiting for a person now.
async fn waiting(s: &StageInner) -> Result<Vec<Value>, Failure> {
    let listed = s.get("/v1/approvals").await.map_err(|e| match e {
        Failure::Broken(m) => broken(format!("{m}\nthe sidecar's log ends:\n{}", s.log_tail())),
        other => other,
    })?;
    Ok(listed["approvals"].as_array().cloned().unwrap_or_default())
}

const CLOCK_ENV: &[(&str, &str)] = &[
    ("PTC_TIMEOUT", "3"),
    ("PTC_APPROVAL_TIMEOUT", "4"),
    ("PTC_APPROVE_TOOLS", "noop"),
];

/// Code that keeps a call waiting for a person for good (two at once, each asked again as soon
/// as it is denied), while a thread spins a core.
const WAIT_FOREVER_PY: &str = r#"
import sys, threading
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
async def ask():
    while True:
        try:
            await noop()
        except ToolDenied as e:
            print("DENIED", e, flush=True)
await asyncio.gather(ask(), ask())
"#;

const WAIT_FOREVER_SH: &str = r#"
( while :; do :; done ) &
ask() { while :; do r=$(noop '{}' 2>&1); echo "DENIED $r"; done; }
ask & ask
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_kept_waiting_for_good_ends_by_the_timeout_and_the_approval_share() {
    let opts = Opts {
        env: CLOCK_ENV,
        ..Opts::default()
    };
    against_both("shares_clock", opts, |s| async move {
        let idle = victim_median(&s, 20).await?;
        let cap = Duration::from_secs(TIMEOUT_SECS + APPROVAL_SECS);
        for (lang, code) in [("python", WAIT_FOREVER_PY), ("bash", WAIT_FOREVER_SH)] {
            let body = json!({"code": code, "lang": lang});
            let started = Instant::now();
            let attacker = {
                let s = s.clone();
                tokio::spawn(async move { s.exec_body(body).await })
            };
            // Midway through its share of waiting, a victim's calls answer as on an idle sidecar.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let under = victim_median(&s, 20).await?;
            let r = attacker
                .await
                .map_err(|e| broken(format!("the attacker's task: {e}")))?
                .map_err(|e| broken(format!("the attacker's run got no answer: {e}")))?;
            let took = started.elapsed();
            let stdout = r["stdout"].as_str().unwrap_or_default();
            eprintln!(
                "shares_clock {} {lang}: {took:?}, status {}, {} denials",
                s.who.label(),
                r["status"],
                stdout.matches("DENIED").count()
            );
            // Attempted: its calls waited for a person until the share was spent.
            if !stdout.contains("no one answered within 4 s") {
                return Err(broken(format!(
                    "no call of the {lang} run waited out the share: {r}"
                )));
            }
            // Refused: later calls denied at once, and the run ended by its cap.
            if !stdout.contains("its whole share") {
                return Err(attack(format!(
                    "the {lang} run's calls were still put to a person after its share: {r}"
                )));
            }
            if r["status"] != "timeout" || took > cap + Duration::from_secs(3) {
                return Err(attack(format!(
                    "the {lang} run lasted {took:?} (PTC_TIMEOUT {TIMEOUT_SECS} s + \
                     PTC_APPROVAL_TIMEOUT {APPROVAL_SECS} s): {}",
                    r["status"]
                )));
            }
            if took < cap - Duration::from_millis(500) {
                return Err(broken(format!(
                    "the {lang} run ended early, in {took:?}: {r}"
                )));
            }
            check_victim(idle, under, &format!("shares_clock {lang}"))?;
        }
        s.check_healthy("a run kept a call waiting for good").await
    })
    .await;
}

const TABLE_ENV: &[(&str, &str)] = &[
    ("PTC_APPROVAL_TIMEOUT", "30"),
    ("PTC_APPROVE_TOOLS", "echo"),
];

/// Gathers 20 calls with 1 MiB of text each, all waiting for a person; prints how many were
/// refused for the run's share.
const FILL_TABLE_PY: &str = r#"
big = "x" * (1 << 20)
async def ask(i):
    try:
        await echo(text=big)
        return "ok"
    except ToolDenied as e:
        return str(e)
said = await asyncio.gather(*[ask(i) for i in range(20)])
print("SHARE", sum("its share" in s for s in said), flush=True)
print("OTHER", [s for s in said if "its share" not in s][:2])
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_table_and_its_bytes_are_shared_per_run() {
    let opts = Opts {
        env: TABLE_ENV,
        ..Opts::default()
    };
    against_both("shares_approvals", opts, |s| async move {
        let before = rss_kib(s.pid);
        // Three runs each try to keep 20 MiB waiting: 16 MiB each fit their share, and 48 MiB in
        // all leaves a fourth run its floor only.
        let attackers: Vec<_> = (0..3)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { s.exec(FILL_TABLE_PY).await })
            })
            .collect();
        // Wait until they wait: each run keeps its share (15 of the 1 MiB calls in 16 MiB).
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut listed = Vec::new();
        while Instant::now() < deadline {
            listed = waiting(&s).await?;
            if listed.len() >= 45 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut runs = std::collections::HashMap::<String, usize>::new();
        for a in &listed {
            *runs
                .entry(a["run"].as_str().unwrap_or_default().into())
                .or_default() += 1;
        }
        if runs.len() != 3 || runs.values().any(|n| *n > 16) {
            return Err(attack(format!("calls waiting by run: {runs:?}")));
        }
        // Listed as excerpts: the listing is small however big what waits.
        for a in &listed {
            let excerpt = a["args_excerpt"].as_str().unwrap_or_default();
            if a["args_cut"] != true || excerpt.len() > 4200 || a.get("args").is_some() {
                return Err(attack(format!(
                    "a listing held more than an excerpt: {}",
                    &a.to_string()[..200.min(a.to_string().len())]
                )));
            }
        }
        // The whole arguments, fetched one call at a time.
        let id = listed[0]["id"].as_str().unwrap_or_default().to_string();
        let whole = s.get(&format!("/v1/approvals/{id}/args")).await?;
        if whole["text"].as_str().map(str::len) != Some(1 << 20) {
            return Err(broken(
                "GET /v1/approvals/{id}/args did not give the whole arguments",
            ));
        }
        let peak = rss_kib(s.pid);
        // A victim's gated call still waits for a person (its floor) and is answered.
        let victim = {
            let s = s.clone();
            tokio::spawn(async move { s.exec("print((await echo(text='mine'))['text'])").await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut mine = None;
        while mine.is_none() && Instant::now() < deadline {
            mine = waiting(&s)
                .await?
                .into_iter()
                .find(|a| a["args"]["text"] == "mine")
                .and_then(|a| a["id"].as_str().map(str::to_string));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Some(mine) = mine else {
            return Err(attack("the victim's call was not put to a person"));
        };
        s.post(&format!("/v1/approvals/{mine}"), &json!({"approved": true}))
            .await?;
        let r = victim
            .await
            .map_err(|e| broken(e.to_string()))?
            .map_err(|e| attack(format!("the victim's run got no answer: {e}")))?;
        if r["stdout"] != "mine\n" {
            return Err(attack(format!("the victim's call failed: {r}")));
        }
        for a in waiting(&s).await? {
            let id = a["id"].as_str().unwrap_or_default();
            s.post(&format!("/v1/approvals/{id}"), &json!({"approved": false}))
                .await?;
        }
        let mut refused = 0;
        for attacker in attackers {
            let r = attacker
                .await
                .map_err(|e| broken(e.to_string()))?
                .map_err(|e| broken(format!("an attacker got no answer: {e}")))?;
            let out = r["stdout"].as_str().unwrap_or_default();
            refused += out
                .lines()
                .find_map(|l| l.strip_prefix("SHARE ")?.trim().parse::<usize>().ok())
                .ok_or_else(|| broken(format!("an attacker did not finish: {r}")))?;
        }
        eprintln!(
            "shares_approvals {}: {} waiting in {} runs, {refused} refused for their share; \
             RSS {before} KiB before, {peak} KiB with them waiting",
            s.who.label(),
            listed.len(),
            runs.len()
        );
        if refused < 3 * 4 {
            return Err(attack(format!(
                "only {refused} of the 15 calls past the shares were refused"
            )));
        }
        // What waits is held once, as JSON: ~48 MiB, not a parsed copy per listing (what
        // grows past it is the bodies parsed on their way in, which the allocator keeps).
        if peak.saturating_sub(before) > 256 << 10 {
            return Err(attack(format!(
                "the sidecar grew from {before} KiB to {peak} KiB with 48 MiB waiting"
            )));
        }
        s.check_healthy("runs filled the approval table").await
    })
    .await;
}

/// Holds as many connections to the run's own end of the bridge as it can open (its share is
/// accepted, the rest waits in its backlog), for `hold` seconds.
const HOLD_CONNECTIONS_PY: &str = r#"
import socket, time, ptc_sdk
host, port = ptc_sdk._client.host, ptc_sdk._client.port
held = []
for i in range(200):
    try:
        s = socket.socket()
        s.settimeout(0.2)
        s.connect((host, port))
        held.append(s)
    except OSError:
        break
print("HELD", len(held), flush=True)
time.sleep(HOLD)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_holding_every_connection_they_can_take_none_of_anothers() {
    against_both("shares_connections", Opts::default(), |s| async move {
        let idle = victim_median(&s, 20).await?;
        // 17 runs of 64 and more connections each: more than 1,024 together.
        let code = HOLD_CONNECTIONS_PY.replace("HOLD", "8");
        let attackers: Vec<_> = (0..17)
            .map(|_| {
                let (s, code) = (s.clone(), code.clone());
                tokio::spawn(async move { s.exec(&code).await })
            })
            .collect();
        let idle_descriptors = descriptors_of(s.pid);
        tokio::time::sleep(Duration::from_secs(4)).await;
        let peak_descriptors = descriptors_of(s.pid);
        let under = victim_median(&s, 20).await;
        let mut held = Vec::new();
        for attacker in attackers {
            let r = attacker
                .await
                .map_err(|e| broken(e.to_string()))?
                .map_err(|e| broken(format!("an attacker got no answer: {e}")))?;
            let out = r["stdout"].as_str().unwrap_or_default();
            held.push(
                out.lines()
                    .find_map(|l| l.strip_prefix("HELD ")?.trim().parse::<usize>().ok())
                    .ok_or_else(|| broken(format!("an attacker did not hold: {r}")))?,
            );
        }
        let total: usize = held.iter().sum();
        eprintln!(
            "shares_connections {}: attackers held {total} connections",
            s.who.label()
        );
        if total <= 1024 {
            return Err(broken(format!(
                "the attackers held only {total} connections: {held:?}"
            )));
        }
        check_victim(idle, under?, "shares_connections")?;
        // Accepted: each run's share, not what the runs asked for.
        let bound = idle_descriptors + 17 * 64 + 64;
        eprintln!(
            "shares_connections {}: descriptors {idle_descriptors} idle, {peak_descriptors} \
             held (bound {bound})",
            s.who.label()
        );
        if peak_descriptors > bound {
            return Err(attack(format!(
                "17 runs took the sidecar from {idle_descriptors} to {peak_descriptors} \
                 descriptors (their shares: {bound})"
            )));
        }
        back_to_idle(
            &s,
            idle_descriptors,
            "runs held every connection they could",
        )
        .await?;
        s.check_healthy("runs held every connection they could")
            .await
    })
    .await;
}

pub(super) const RATE_ENV: &[(&str, &str)] =
    &[("PTC_TOOL_LIMITS", r#"{"echo": {"per_second": 1}}"#)];

/// Books 60 turns of a tool limited to one call a second, and ends after one second.
const BOOK_TURNS_PY: &str = r#"
calls = asyncio.gather(*[echo(text=str(i)) for i in range(60)])
try:
    await asyncio.wait_for(calls, 1.0)
except (asyncio.TimeoutError, ToolError) as e:
    print("GAVE UP", type(e).__name__, flush=True)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_a_rate_booked_by_a_run_that_ended_hold_up_no_other() {
    let opts = Opts {
        env: RATE_ENV,
        ..Opts::default()
    };
    against_both("shares_rate", opts, |s| async move {
        booked_turns_hold_up_no_other(&s, json!({"code": BOOK_TURNS_PY}), "shares_rate").await
    })
    .await;
}

/// The run of `body` books 60 turns of `echo` (limited to one call a second by [`RATE_ENV`]),
/// gives up after a second (printing `GAVE UP`) and ends: the next run's one call waits a
/// turn at most.
pub(super) async fn booked_turns_hold_up_no_other(
    s: &StageInner,
    body: Value,
    test: &str,
) -> Verdict {
    let r = s
        .exec_body(body)
        .await
        .map_err(|e| broken(format!("the attacker got no answer: {e}")))?;
    if !r["stdout"].as_str().unwrap_or_default().contains("GAVE UP") {
        return Err(broken(format!(
            "the attacker did not book and give up: {r}"
        )));
    }
    // Its 59 waiting calls went with it: the next run's one call waits a turn at most.
    let started = Instant::now();
    let v = s
        .exec("print((await echo(text='mine'))['text'])")
        .await
        .map_err(|e| attack(format!("the victim's run got no answer: {e}")))?;
    let took = started.elapsed();
    eprintln!(
        "{test} {}: the next run's call took {took:?}",
        s.who.label()
    );
    if v["stdout"] != "mine\n" || took > Duration::from_secs(3) {
        return Err(attack(format!(
            "after a run booked 60 turns and ended, the next run's call took {took:?}: {v}"
        )));
    }
    Ok(())
}

/// Opens `N` saves whose bodies trickle in (a byte every 100 ms of a declared megabyte) on the
/// run's own bridge, and holds them for `HOLD` seconds.
const SLOW_SAVES_PY: &str = r#"
import socket, time, ptc_sdk
c = ptc_sdk._client
held = []
for i in range(N):
    try:
        s = socket.create_connection((c.host, c.port), timeout=1)
        s.sendall(("POST /file?name=slow%d.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Length: 1048576\r\n\r\n" % (i, c.token)).encode())
        held.append(s)
    except OSError:
        break
print("HELD", len(held), flush=True)
end = time.time() + HOLD
while time.time() < end:
    for s in held:
        try:
            s.send(b"x")
        except OSError:
            pass
    time.sleep(0.1)
"#;

/// Writes past the scratch quota quickly (files of 1 MiB: no one file may pass the quota),
/// then sleeps: the watch must stop it.
const PAST_QUOTA_PY: &str = r#"
import time
for i in range(40):
    with open("big%d.bin" % i, "wb") as f:
        f.write(b"q" * (1 << 20))
print("WROTE 40 MiB", flush=True)
time.sleep(20)
"#;

/// The sidecar's threads.
fn threads_of(pid: i32) -> u64 {
    status_field(pid, "Threads:")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_saves_hold_a_share_of_threads_and_silence_no_watch() {
    against_both("shares_saves", Opts::default(), |s| async move {
        let idle_threads = threads_of(s.pid);
        let idle_descriptors = descriptors_of(s.pid);
        let code = SLOW_SAVES_PY.replace("HOLD", "10").replace("N", "64");
        // Eight runs in sessions of their own (where save_file writes), 64 slow saves each.
        let attackers: Vec<_> = (0..8)
            .map(|i| {
                let (s, code) = (s.clone(), code.clone());
                tokio::spawn(async move {
                    s.exec_body(json!({"code": code, "session_id": format!("slow-{i}")}))
                        .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(4)).await;
        let peak_threads = threads_of(s.pid);
        let peak_descriptors = descriptors_of(s.pid);
        // A file route answers at once.
        let started = Instant::now();
        s.get("/v1/sessions").await?;
        let listing = started.elapsed();
        // The quota watch still looks: a run past its scratch quota is stopped.
        let started = Instant::now();
        let r = s
            .exec(PAST_QUOTA_PY)
            .await
            .map_err(|e| attack(format!("the quota run got no answer: {e}")))?;
        let stopped = started.elapsed();
        let mut held = 0;
        for attacker in attackers {
            let r = attacker
                .await
                .map_err(|e| broken(e.to_string()))?
                .map_err(|e| broken(format!("an attacker got no answer: {e}")))?;
            held += r["stdout"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("HELD ")?.trim().parse::<usize>().ok())
                .ok_or_else(|| broken(format!("an attacker did not hold: {r}")))?;
        }
        eprintln!(
            "shares_saves {}: {held} slow saves; threads {idle_threads} idle, {peak_threads} \
             with them; GET /v1/sessions {listing:?}; the quota run stopped after {stopped:?} \
             ({})",
            s.who.label(),
            r["status"]
        );
        if held < 8 * 32 {
            return Err(broken(format!("the attackers opened only {held} saves")));
        }
        if r["status"] == "ok" || !r["stderr"].as_str().unwrap_or_default().contains("quota") {
            return Err(attack(format!(
                "a run past its scratch quota was not stopped: {r}"
            )));
        }
        if stopped > Duration::from_secs(10) || listing > Duration::from_secs(2) {
            return Err(attack(format!(
                "slow saves slowed the sidecar: the quota run took {stopped:?}, GET \
                 /v1/sessions {listing:?}"
            )));
        }
        // At most every run's floor and the pool: not a thread per save.
        if peak_threads > idle_threads + 8 * 4 + 32 {
            return Err(attack(format!(
                "{held} slow saves took the sidecar from {idle_threads} to {peak_threads} threads"
            )));
        }
        // A connection and a file per save at most, within each run's share of connections.
        let bound = idle_descriptors + 8 * 64 * 2 + 64;
        eprintln!(
            "shares_saves {}: descriptors {idle_descriptors} idle, {peak_descriptors} with the \
             saves (bound {bound})",
            s.who.label()
        );
        if peak_descriptors > bound {
            return Err(attack(format!(
                "{held} slow saves took the sidecar from {idle_descriptors} to \
                 {peak_descriptors} descriptors"
            )));
        }
        // The sessions' interpreters stay (their pipes and bridges are theirs): once the
        // sessions are deleted, nothing of the attack may stay.
        for i in 0..8 {
            s.delete(&format!("/v1/sessions/slow-{i}")).await?;
        }
        back_to_idle(&s, idle_descriptors, "slow saves").await
    })
    .await;
}

/// Once an attack is over (and the bridge's grace for idle sockets), the sidecar holds about
/// the descriptors it held before it: nothing of the attack is kept.
pub(super) async fn back_to_idle(s: &StageInner, idle: usize, after: &str) -> Verdict {
    let started = Instant::now();
    let mut now = descriptors_of(s.pid);
    while now > idle + 16 && started.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        now = descriptors_of(s.pid);
    }
    if now > idle + 16 {
        return Err(attack(format!(
            "after {after}, the sidecar still holds {now} descriptors ({idle} before)"
        )));
    }
    Ok(())
}

const LOOPBACK_ENV: &[(&str, &str)] = &[("PTC_SANDBOX", "off")];

/// Through the sidecar's loopback listener (runs without a network namespace): opens up to
/// 200 connections and presents the run's token on each (a call whose body never comes), then
/// reads what each got: a refusal for the run's share, a close, or nothing (held).
const CLAIM_LOOPBACK_PY: &str = r#"
import socket, time, ptc_sdk
c = ptc_sdk._client
socks, failed = [], None
until = time.time() + 8
while len(socks) < 200 and time.time() < until:
    try:
        s = socket.create_connection((c.host, c.port), timeout=1)
        s.sendall(("POST /call HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" % c.token).encode())
        socks.append(s)
    except OSError as e:
        failed = failed or repr(e)
        time.sleep(0.05)
print("FIRST FAILURE", failed, flush=True)
time.sleep(1.5)
held = refused = closed = 0
for s in socks:
    s.settimeout(0.01)
    try:
        got = s.recv(64)
        if got.startswith(b"HTTP/1.1 429"):
            refused += 1
        elif not got:
            closed += 1
        else:
            held += 1
    except socket.timeout:
        held += 1
    except OSError:
        closed += 1
print("CLAIMS", held, refused, closed, flush=True)
time.sleep(HOLD)
"#;

/// Opens as many connections to the loopback as its descriptors allow and sends nothing, then
/// counts those the sidecar closed.
const FLOOD_LOOPBACK_PY: &str = r#"
import socket, time, ptc_sdk
c = ptc_sdk._client
socks = []
until = time.time() + 8
while len(socks) < 240 and time.time() < until:
    try:
        socks.append(socket.create_connection((c.host, c.port), timeout=1))
    except OSError:
        time.sleep(0.05)
time.sleep(HOLD)
closed = 0
for s in socks:
    s.settimeout(0.01)
    try:
        if not s.recv(1):
            closed += 1
    except socket.timeout:
        pass
    except OSError:
        closed += 1
print("FLOOD", len(socks), closed, flush=True)
"#;

/// The figures a script printed after `prefix`.
fn figures(r: &Value, prefix: &str) -> Result<Vec<usize>, Failure> {
    let out = r["stdout"].as_str().unwrap_or_default();
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .ok_or_else(|| broken(format!("no {prefix} line: {r}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_the_loopback_hold_a_share_of_its_connections() {
    let opts = Opts {
        env: LOOPBACK_ENV,
        ..Opts::default()
    };
    against_both("shares_loopback", opts, |s| async move {
        let idle = victim_median(&s, 20).await?;
        let refused_before = share_refusals(&s, "connections").await?;
        // 17 runs claim 200 connections each, 8 more hold 240 each sending nothing: more than
        // the loopback takes (64 per run of 32, and 64 more).
        let claim = CLAIM_LOOPBACK_PY.replace("HOLD", "6");
        let flood = FLOOD_LOOPBACK_PY.replace("HOLD", "6");
        let attackers: Vec<_> = (0..25)
            .map(|i| {
                let s = s.clone();
                let code = if i < 17 { claim.clone() } else { flood.clone() };
                tokio::spawn(async move { s.exec(&code).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(4)).await;
        let under = victim_median(&s, 20).await;
        let mut claims = Vec::new();
        let (mut flooded, mut evicted) = (0, 0);
        for (i, attacker) in attackers.into_iter().enumerate() {
            let r = attacker
                .await
                .map_err(|e| broken(e.to_string()))?
                .map_err(|e| broken(format!("an attacker got no answer: {e}")))?;
            if i < 17 {
                claims.push(figures(&r, "CLAIMS ")?);
            } else {
                let f = figures(&r, "FLOOD ")?;
                flooded += f.first().copied().unwrap_or(0);
                evicted += f.get(1).copied().unwrap_or(0);
            }
        }
        let refused_after = share_refusals(&s, "connections").await?;
        eprintln!(
            "shares_loopback {}: claims (held, refused, closed) {claims:?}; {flooded} idle \
             connections, {evicted} closed for room; {} refusals counted",
            s.who.label(),
            refused_after - refused_before
        );
        // Attempted: most attackers got past their share (on a busy machine some connects
        // time out before the listener takes them: the kernel's backlog, not a share).
        let tried = |c: &Vec<usize>| c.iter().sum::<usize>();
        let past_share = claims
            .iter()
            .filter(|c| c.len() == 3 && tried(c) > 64)
            .count();
        if past_share < 8 {
            return Err(broken(format!(
                "only {past_share} attackers opened more than their share: {claims:?}"
            )));
        }
        // Refused: no run holds more than its share, and each that tried more was told.
        if let Some(c) = claims
            .iter()
            .find(|c| c.len() == 3 && (c[0] > 64 || (tried(c) > 64 && c[1] == 0)))
        {
            return Err(attack(format!(
                "a run held {} connections to the loopback (its share: 64), {} refused",
                c[0], c[1]
            )));
        }
        if refused_after <= refused_before {
            return Err(attack(
                "no refusal of a run's share of connections was counted",
            ));
        }
        check_victim(idle, under?, "shares_loopback")?;
        s.check_healthy("runs held every loopback connection they could")
            .await
    })
    .await;
}

const CPU_ENV: &[(&str, &str)] = &[("PTC_TIMEOUT", "10")];

/// A bash run whose work is spread over four processes, each under `RLIMIT_CPU` alone.
const SPREAD_CPU_SH: &str = r#"
for i in 1 2 3 4; do ( while :; do :; done ) & done
wait
"#;

/// CPU ticks of every process under the sidecar, its reaped children's included.
fn tree_ticks(pid: i32) -> u64 {
    ptc_sidecar::run::cpu::tree_ticks(pid).unwrap_or(0)
}

/// Awaits `run` (a run of `s`) while sampling from outside, every 100 ms, the CPU time of the
/// sidecar's whole process tree (what a killed tree's reaper adds up is not always there once
/// it is gone): what `run` gave, its wall time, and the CPU seconds used meanwhile.
pub(super) async fn measuring_cpu<T>(
    s: &StageInner,
    run: impl std::future::Future<Output = T>,
) -> Result<(T, Duration, f64), Failure> {
    let before = tree_ticks(s.pid);
    let started = Instant::now();
    let (r, most) = peak_while(s.pid, tree_ticks, run).await?;
    let took = started.elapsed();
    // SAFETY: sysconf only reads a system value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Ok((r, took, most.saturating_sub(before) as f64 / hz))
}

/// Awaits `run` while sampling `sample(pid)` from outside every 100 ms (and once more at its
/// end): what `run` gave, and the largest sample.
pub(super) async fn peak_while<T>(
    pid: i32,
    sample: fn(i32) -> u64,
    run: impl std::future::Future<Output = T>,
) -> Result<(T, u64), Failure> {
    let sampling = CancellationToken::new();
    let sampler = {
        let stop = sampling.clone();
        tokio::spawn(async move {
            let mut most = sample(pid);
            while !stop.is_cancelled() {
                most = most.max(sample(pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            most.max(sample(pid))
        })
    };
    let r = run.await;
    sampling.cancel();
    let most = sampler.await.map_err(|e| broken(e.to_string()))?;
    Ok((r, most))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bash_runs_processes_share_one_cpu_limit() {
    let opts = Opts {
        env: CPU_ENV,
        ..Opts::default()
    };
    against_both("shares_cpu", opts, |s| async move {
        // PTC_TIMEOUT 10 s: each process may use 15 s, the run 15 s in all. Four busy loops on
        // this machine's two cores pass 15 s after ~7.5 s, before the clock ends the run; on a
        // busier machine the clock comes first, and the run used less than that anyway.
        let limit = 15.0;
        let (r, took, used) = measuring_cpu(&s, async {
            s.exec_body(json!({"code": SPREAD_CPU_SH, "lang": "bash"}))
                .await
                .map_err(|e| broken(format!("the bash run got no answer: {e}")))
        })
        .await?;
        let r = r?;
        let stderr = r["stderr"].as_str().unwrap_or_default();
        eprintln!(
            "shares_cpu {}: {used:.1} s of CPU in {took:?}, status {}: {}",
            s.who.label(),
            r["status"],
            stderr.lines().last().unwrap_or_default()
        );
        if r["status"] == "ok" {
            return Err(broken(format!("the busy loops ended by themselves: {r}")));
        }
        // Refused: the run's processes together stop at the run's limit (and a measure's
        // interval of four loops).
        if used > limit + 2.0 {
            return Err(attack(format!(
                "a bash run's four processes used {used:.1} s of CPU (the run's limit {limit} \
                 s): {r}"
            )));
        }
        if r["status"] != "timeout" && !stderr.contains("of CPU together") {
            return Err(broken(format!("the run ended for another reason: {r}")));
        }
        s.check_healthy("a bash run spread its CPU over processes")
            .await
    })
    .await;
}
