//! Bash runs over the continuation protocol (`lang: "bash"`), through real HTTP with real bash
//! children in the sandbox: tool functions, parallel calls, processes that must die with the
//! run, the sandbox around bash, and bad input. The real client's scenarios are in
//! `tests/librechat/drive-bash.mjs` (run by `librechat::the_real_librechat_client`).

use crate::common::{TEST_TIMEOUT, assert_nothing_left};
use crate::librechat::{PROGRAMMATIC, answer_all, cont, drive_body, post, sidecar, tools};
use crate::procs::{marker, with_cmdline};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn bash(code: &str) -> Value {
    json!({"lang": "bash", "code": code, "tools": tools(), "timeout": 20000})
}

#[tokio::test]
async fn tools_are_functions_and_gathered_calls_share_a_round() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let code = "w=$(get_weather '{\"city\": \"Rome\"}'); echo \"$w\" | jq -r .city\n\
                    { add '{\"a\": 1, \"b\": 2}' > one; } &\n\
                    { add '{\"a\": 3, \"b\": 4}' > two; } &\n\
                    wait; jq -n \"$(cat one) + $(cat two)\"\n\
                    add '{\"a\": 1' ; echo \"bad json: $?\"";
        let (r, rounds) = drive_body(&s, &bash(code)).await;
        assert_eq!(r["status"], "completed", "{r}");
        assert_eq!(r["stdout"], "Rome\n10\nbad json: 1\n");
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("add: the argument is not JSON"),
            "{r}"
        );
        // One call, then the two started together in one round; the bad one never left bash's
        // side of the bridge as a call.
        let sizes: Vec<usize> = rounds
            .iter()
            .map(|r| r["tool_calls"].as_array().unwrap().len())
            .collect();
        assert_eq!(sizes, vec![1, 2]);
        assert_eq!(rounds[0]["tool_calls"][0]["name"], "get-weather");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// Code may start processes; every one of them, in the run's group or detached from it
/// (`setsid`, a double fork), is dead once the run has answered: forked from a fork server of
/// the run's own (no warm pool) and from the shared one (a warm pool).
#[tokio::test]
async fn processes_of_a_bash_run_die_with_it() {
    for warm in ["0", "1"] {
        processes_die_with_the_run(warm).await;
    }
}

async fn processes_die_with_the_run(warm_workers: &str) {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[("PTC_WARM_WORKERS", warm_workers)]).await;
        // Found from outside by their command lines: the pids the run sees are its own
        // namespace's.
        let [a, b, c] = [marker(), marker(), marker()].map(|n| format!("300.{n}"));
        let code = format!(
            "sleep {a} & echo $!\n\
             setsid sleep {b} & echo $!\n\
             ( setsid sh -c 'sleep {c} & echo $!' ) \n\
             sleep 0.2; ls /usr >/dev/null && echo listed"
        );
        let (status, r) = post(&s, PROGRAMMATIC, &bash(&code)).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["status"], "completed", "{r}");
        let stdout = r["stdout"].as_str().unwrap();
        assert!(stdout.ends_with("listed\n"), "{r}");
        let started: Vec<&str> = stdout
            .lines()
            .filter(|l| l.parse::<i32>().is_ok())
            .collect();
        assert_eq!(started.len(), 3, "the three were started: {stdout}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let alive: Vec<i32> = [&a, &b, &c]
                .iter()
                .flat_map(|m| with_cmdline(&format!("sleep {m}")))
                .collect();
            if alive.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "outlived the run: {alive:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if warm_workers == "0" {
            assert_nothing_left(&s).await;
        }
    })
    .await
    .unwrap();
}

/// Bash is inside the same sandbox as Python: files outside its scratch directory, the
/// sidecar's process and other TCP ports are out of reach (where the kernel has the layers).
#[tokio::test]
async fn bash_stays_in_the_sandbox() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let status = s
            .sidecar
            .state
            .runner
            .as_ref()
            .unwrap()
            .sandbox_status()
            .clone();
        if !status.landlock.starts_with("abi") || !status.missing.is_empty() {
            println!("skipped: this kernel lacks a layer ({status})");
            return;
        }
        let code = format!(
            "cat /etc/passwd >/dev/null 2>&1; echo passwd $?\n\
             cat /proc/{}/environ >/dev/null 2>&1; echo environ $?\n\
             echo hi > /tmp/ptc-bash-escape 2>/dev/null; echo tmp $?\n\
             (exec 3<>/dev/tcp/127.0.0.1/{}) 2>/dev/null; echo tcp $?\n\
             echo ok > mine.txt && cat mine.txt",
            std::process::id(),
            s.addr.port()
        );
        let (status, r) = post(&s, PROGRAMMATIC, &bash(&code)).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            r["stdout"], "passwd 1\nenviron 1\ntmp 1\ntcp 1\nok\n",
            "{r}"
        );
        assert!(!std::path::Path::new("/tmp/ptc-bash-escape").exists());
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bad_bash_gets_a_clear_error_and_leaves_nothing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        // A syntax error: bash's message in stderr.
        let (_, r) = post(&s, PROGRAMMATIC, &bash("echo a\nif then fi")).await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(
            r["stderr"].as_str().unwrap().contains("syntax error"),
            "{r}"
        );
        // Too long for one argument of bash -c.
        let (_, r) = post(&s, PROGRAMMATIC, &bash(&"#".repeat(200_000))).await;
        assert_eq!(r["status"], "error", "{r}");
        assert!(
            r["stderr"]
                .as_str()
                .unwrap()
                .contains("bash code is limited to"),
            "{r}"
        );
        // A call whose run is over: the function says so and returns 2.
        let (_, r) = post(&s, PROGRAMMATIC, &bash("get_weather '{\"city\": \"X\"}'")).await;
        assert_eq!(r["status"], "tool_call_required", "{r}");
        let mut body = bash("sleep 30");
        body["timeout"] = json!(1000);
        let (_, r2) = post(&s, PROGRAMMATIC, &body).await;
        assert_eq!(r2["status"], "error", "{r2}");
        assert_eq!(r2["error"], "Time limit exceeded", "{r2}");
        // The first run still answers its round.
        let (_, done) = post(
            &s,
            PROGRAMMATIC,
            &cont(&r["continuation_token"], answer_all(&r)),
        )
        .await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_nothing_left(&s).await;
    })
    .await
    .unwrap();
}

/// A catalog of tools named like bash builtins (and like the call helper): each is callable
/// under its suffixed name, bash's own words stay bash's, and code that defines its own
/// `printf`, `echo`, `read` and `wait` (and sets `IFS`) still gets every result right.
#[tokio::test]
async fn tools_named_like_builtins_are_suffixed_and_calls_survive_shadowing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let s = sidecar(&[]).await;
        let names = [
            "builtin",
            "command",
            "printf",
            "echo",
            "wait",
            "read",
            "__ptc_call",
            "__ptc_post",
            "search_tools",
        ];
        let tools: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}))
            .collect();
        let code = "builtin printf 'types %s\\n' \"$(type -t builtin) $(type -t command) $(type -t echo)\"\n\
                    echo plain\n\
                    r1=$(builtin_tool '{\"n\": 1}'); r2=$(command_tool '{\"n\": 2}')\n\
                    printf() { builtin echo shadowed; }\n\
                    echo() { builtin echo shadowed; }\n\
                    read() { return 7; }\n\
                    wait() { return 9; }\n\
                    IFS=0\n\
                    r3=$(printf_tool '{\"n\": 3}'); r4=$(echo_tool '{\"n\": 4}')\n\
                    r5=$(wait_tool '{\"n\": 5}'); r6=$(read_tool '{\"n\": 6}')\n\
                    r7=$(__ptc_call_tool '{\"n\": 7}'); r8=$(__ptc_post_tool '{\"n\": 8}')\n\
                    r9=$(search_tools_tool '{\"n\": 9}')\n\
                    builtin printf '%s\\n' \"$r1\" \"$r2\" \"$r3\" \"$r4\" \"$r5\" \"$r6\" \"$r7\" \"$r8\" \"$r9\"\n\
                    printf x";
        let body = json!({"lang": "bash", "code": code, "tools": tools, "timeout": 20000});
        let (status, mut r) = post(&s, PROGRAMMATIC, &body).await;
        assert_eq!(status, 200, "{r}");
        let mut called = Vec::new();
        while r["status"] == "tool_call_required" {
            let results: Vec<Value> = r["tool_calls"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    called.push(c["name"].as_str().unwrap().to_string());
                    json!({"call_id": c["id"], "result": {"from": c["name"], "n": c["input"]["n"]}, "is_error": false})
                })
                .collect();
            let (status, next) =
                post(&s, PROGRAMMATIC, &cont(&r["continuation_token"], json!(results))).await;
            assert_eq!(status, 200, "{next}");
            r = next;
        }
        assert_eq!(r["status"], "completed", "{r}");
        let results: String = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{{\"from\":\"{n}\",\"n\":{}}}\n", i + 1))
            .collect();
        assert_eq!(
            r["stdout"].as_str().unwrap(),
            format!("types builtin builtin builtin\nplain\n{results}shadowed\n"),
            "{r}"
        );
        assert_eq!(called, names);
        assert_eq!(r["stderr"], "", "{r}");
    })
    .await
    .unwrap();
}
