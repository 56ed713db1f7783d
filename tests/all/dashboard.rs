//! The dashboard in a real browser: Debian's headless Chromium, driven over WebDriver
//! (chromedriver's W3C protocol, spoken with reqwest). Two sidecars publish to a real Redis as
//! two agents; `ptc-sidecar dashboard` serves their page; the test waits until the page shows
//! both agents, the run with parallel calls and a failing one, its calls in the waterfall
//! (overlapping bars) and the error text, and saves a screenshot as a test artifact
//! (`target/test-artifacts/dashboard.png`). A sidecar's own page opened after its runs shows
//! them; with tools named as real MCP servers name theirs, no two labels of the waterfall and
//! its time axis overlap (their boxes measured in the page) and each cut name is whole on hover;
//! a run opened shows its code, output and each call's arguments and result as text, never as
//! markup (`<script>` and `<img onerror>` in all of them). scripts/test installs chromium and
//! chromedriver; without them the tests say so and pass nothing off as tested.

use crate::common::{
    HostServer, HostTool, TEST_TIMEOUT, TempDir, TestRedis, TestSidecar, corpus_dir, unique,
};
use crate::metrics::{sidecar, start_dashboard};
use base64::Engine;
use serde_json::{Value, json};
use std::time::Duration;

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const CHROMIUM: &str = "/usr/bin/chromium";

/// A chromedriver on a port of its own choosing, and its URL.
async fn start_chromedriver() -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(CHROMEDRIVER)
        .arg("--port=0")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    loop {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("chromedriver said where it listens");
        if let Some(port) = line.strip_prefix("ChromeDriver was started successfully on port ") {
            let port = port.trim_end_matches('.');
            return (child, format!("http://127.0.0.1:{port}"));
        }
    }
}

/// One WebDriver session.
struct Browser {
    http: reqwest::Client,
    session: String,
}

impl Browser {
    async fn open(driver: &str) -> Browser {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"
            ]}
        }}});
        let r: Value = http
            .post(format!("{driver}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{r}"));
        Browser {
            http,
            session: format!("{driver}/session/{id}"),
        }
    }

    async fn command(&self, path: &str, body: Value) -> Value {
        let r: Value = self
            .http
            .post(format!("{}/{path}", self.session))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        r["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.command("url", json!({"url": url})).await;
    }

    async fn script(&self, script: &str) -> Value {
        self.command("execute/sync", json!({"script": script, "args": []}))
            .await
    }

    async fn screenshot(&self, path: &std::path::Path) {
        let r: Value = self
            .http
            .get(format!("{}/screenshot", self.session))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["value"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// The browser window's size (a taller one shows the opened run too).
    async fn resize(&self, width: u32, height: u32) {
        self.command("window/rect", json!({"width": width, "height": height}))
            .await;
    }

    async fn close(&self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

#[tokio::test]
async fn the_dashboard_page_shows_two_agents_a_run_its_waterfall_and_the_error() {
    if !std::path::Path::new(CHROMEDRIVER).exists() || !std::path::Path::new(CHROMIUM).exists() {
        eprintln!(
            "dashboard: chromium or chromedriver is not installed (scripts/test installs them); not tested here"
        );
        return;
    }
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = TestRedis::any();
        let (a1, a2) = (unique("agent-one"), unique("agent-two"));
        let (s1, _h1, _d1) = sidecar(&[("REDIS_URL", redis.url.as_str()), ("PTC_AGENT_ID", a1.as_str())]).await;
        let (s2, _h2, _d2) = sidecar(&[("REDIS_URL", redis.url.as_str()), ("PTC_AGENT_ID", a2.as_str())]).await;
        assert_eq!(s1.exec("await get_weather(city='Oslo')").await["status"], "ok");
        let r = s2
            .exec("await asyncio.gather(sleepy(), sleepy(), explode(), return_exceptions=True)")
            .await;
        assert_eq!(r["status"], "ok", "{r}");
        let (_dash, url) = start_dashboard(&redis.url, &[]).await;
        let (_driver, driver) = start_chromedriver().await;
        let browser = Browser::open(&driver).await;
        // Only these two agents: the Redis may be shared with other tests.
        browser.go(&format!("{url}/dashboard")).await;
        let wanted = ["the weather service is down", a1.as_str(), a2.as_str(), "sleepy"];
        for _ in 0..100 {
            let page = browser.script("return document.body.innerText").await;
            if wanted.iter().all(|w| page.as_str().unwrap_or("").contains(w)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Show a2's run (the newest of the two agents) whatever else the Redis holds.
        browser
            .script(&format!(
                "const s = document.getElementById('f-agent'); s.value = {a2:?}; s.onchange(); return 1"
            ))
            .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let page = browser.script("return document.body.innerText").await;
        let page = page.as_str().unwrap_or("");
        let artifact = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts/dashboard.png");
        browser.screenshot(&artifact).await;
        for w in wanted {
            assert!(page.contains(w), "the page does not show {w:?}:\n{page}");
        }
        // Each agent with its health: both ok, nothing running, a2's one run ended ok.
        let agents = browser.script("return document.getElementById('agents').innerText").await;
        let agents = agents.as_str().unwrap_or("");
        for a in [&a1, &a2] {
            let line = agents.lines().skip_while(|l| !l.contains(a.as_str())).take(2).collect::<Vec<_>>().join(" ");
            assert!(line.contains("ok · 0 running · 0/1 recent runs failed"), "{a}: {agents:?}");
        }
        // The tools table follows the agent filter: a2's tools, not a1's get-weather.
        let tools = browser.script("return document.getElementById('tools').innerText").await;
        let tools = tools.as_str().unwrap_or("");
        assert!(tools.contains("sleepy") && tools.contains("explode"), "{tools}");
        assert!(!tools.contains("get-weather"), "{tools}");
        // The two 150 ms calls, started together, overlap in the waterfall; the failed one is red.
        let bars = browser
            .script(
                "return [...document.querySelectorAll('.wf-bar')].map(b => { const r = b.getBoundingClientRect(); \
                 return {left: r.left, right: r.right, failed: b.classList.contains('failed'), title: b.title}; })",
            )
            .await;
        let bars = bars.as_array().unwrap();
        let sleepy: Vec<(f64, f64)> = bars
            .iter()
            .filter(|b| b["title"].as_str().unwrap_or("").starts_with("sleepy"))
            .map(|b| (b["left"].as_f64().unwrap(), b["right"].as_f64().unwrap()))
            .collect();
        assert_eq!(sleepy.len(), 2, "{bars:?}");
        assert!(sleepy[0].0.max(sleepy[1].0) < sleepy[0].1.min(sleepy[1].1), "{bars:?}");
        let failed: Vec<&str> = bars
            .iter()
            .filter(|b| b["failed"] == true)
            .map(|b| b["title"].as_str().unwrap_or(""))
            .collect();
        assert!(failed.len() == 1 && failed[0].starts_with("explode"), "{bars:?}");
        browser.close().await;
    })
    .await
    .unwrap();
}

/// Approve and Deny in the page: two calls of one run wait for a person (behind the API key);
/// the page lists both with their arguments, a reason typed into one row survives the page's
/// refreshes, Deny sends it, Approve lets the other call go, and the run's code sees both
/// answers. Screenshot: `target/test-artifacts/dashboard-approvals.png`.
#[tokio::test]
async fn a_person_approves_and_denies_calls_in_the_dashboard() {
    if !std::path::Path::new(CHROMEDRIVER).exists() || !std::path::Path::new(CHROMIUM).exists() {
        eprintln!(
            "dashboard: chromium or chromedriver is not installed (scripts/test installs them); not tested here"
        );
        return;
    }
    tokio::time::timeout(TEST_TIMEOUT, async {
        let key = "dash-key-1";
        let (s, host, _d) = sidecar(&[("PTC_APPROVE_TOOLS", "get-weather"), ("PTC_API_KEY", key)]).await;
        let code = r#"
async def ask(city):
    try:
        return (await get_weather(city=city))["city"]
    except ToolDenied as e:
        return str(e)
async def big():
    try:
        await get_weather(city="Bergen" + "n" * 20000)
        return "big approved"
    except ToolDenied as e:
        return "big denied"
print(await asyncio.gather(ask("Oslo"), ask("Lima"), big()))
"#;
        let run = {
            let (http, url) = (s.http.clone(), s.url("/v1/exec_code"));
            tokio::spawn(async move {
                let r = http.post(url).header("x-api-key", key).json(&json!({"code": code})).send().await.unwrap();
                r.json::<Value>().await.unwrap()
            })
        };
        let (_driver, driver) = start_chromedriver().await;
        let browser = Browser::open(&driver).await;
        browser.go(&s.url("/dashboard")).await;
        // The page asks for the key; a person types it in.
        browser
            .script(&format!(
                "const k = document.getElementById('key'); k.value = {key:?}; k.onchange(); return 1"
            ))
            .await;
        let mut rows = Value::Null;
        for _ in 0..100 {
            rows = browser
                .script("return [...document.querySelectorAll('.approval')].map(r => r.innerText)")
                .await;
            if rows.as_array().is_some_and(|r| r.len() == 3) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let rows = rows.as_array().cloned().unwrap_or_default();
        assert_eq!(rows.len(), 3, "{rows:?}");
        // The call whose arguments the listing cuts: shown whole (fetched) before Approve is on.
        let big = r#"[...document.querySelectorAll('.approval')].find(r => r.innerText.includes('bytes of arguments') && r.querySelector('.args').textContent.includes('nnnn'))"#;
        let mut shown = Value::Null;
        for _ in 0..50 {
            shown = browser
                .script(&format!(
                    "const r = {big}; return [r.querySelector('.args').textContent.length, r.querySelector('.approve').disabled, r.querySelector('.size').textContent]"
                ))
                .await;
            if shown[1] == false {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(shown[1], false, "Approve stayed off: {shown}");
        assert!(shown[0].as_u64().unwrap_or(0) > 20000, "not whole: {shown}");
        assert!(shown[2].as_str().unwrap_or("").starts_with("20,"), "{shown}");
        assert!(rows.iter().any(|r| r.as_str().unwrap().contains(r#"{"city":"Lima"}"#)), "{rows:?}");
        assert!(rows.iter().all(|r| r.as_str().unwrap().contains("get-weather")), "{rows:?}");
        // A reason typed for Lima's call, kept across two refreshes of the page.
        let lima = r#"[...document.querySelectorAll('.approval')].find(r => r.innerText.includes('Lima'))"#;
        let oslo = r#"[...document.querySelectorAll('.approval')].find(r => r.innerText.includes('Oslo'))"#;
        browser
            .script(&format!("{lima}.querySelector('.reason').value = 'no trips to Lima'; return 1"))
            .await;
        tokio::time::sleep(Duration::from_millis(2200)).await;
        let artifact = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/test-artifacts/dashboard-approvals.png");
        browser.screenshot(&artifact).await;
        browser.script(&format!("{lima}.querySelector('.deny').click(); return 1")).await;
        browser.script(&format!("{oslo}.querySelector('.approve').click(); return 1")).await;
        browser.script(&format!("{big}.querySelector('.deny').click(); return 1")).await;
        let result = run.await.unwrap();
        assert_eq!(
            result["stdout"],
            "['Oslo', 'get_weather: a person denied this call: no trips to Lima', 'big denied']\n",
            "{result}"
        );
        assert_eq!(host.calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        // Both rows are gone once answered.
        let mut left = Value::Null;
        for _ in 0..30 {
            left = browser.script("return document.querySelectorAll('.approval').length").await;
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(left, 0);
        browser.close().await;
    })
    .await
    .unwrap();
}

fn browser_installed() -> bool {
    let there =
        std::path::Path::new(CHROMEDRIVER).exists() && std::path::Path::new(CHROMIUM).exists();
    if !there {
        eprintln!(
            "dashboard: chromium or chromedriver is not installed (scripts/test installs them); not tested here"
        );
    }
    there
}

fn artifact(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/test-artifacts")
        .join(name)
}

/// Markup that runs script if a page ever makes HTML of it; the page must show it as text.
const HOSTILE: &str = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"#;

/// Whether the page made markup of what it showed: an image, a second script, or one ran.
const INJECTED: &str =
    "return [document.images.length, document.scripts.length, typeof window.__pwned]";

/// Names as real MCP servers' tools are dispatched (`server__tool`): the longest of each server
/// of the corpus (tests/corpus, their real `tools/list`), and Atlassian's and Chrome DevTools'
/// remote servers' long ones.
fn real_long_names() -> Vec<String> {
    let mut names = vec![
        "atlassian__getAccessibleAtlassianResources".to_string(),
        "chrome-devtools__performance_analyze_insight".to_string(),
    ];
    for server in ["github", "filesystem", "everything"] {
        let text = std::fs::read_to_string(corpus_dir().join(format!("{server}.json"))).unwrap();
        let list: Value = serde_json::from_str(&text).unwrap();
        let longest = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str())
            .max_by_key(|n| n.len())
            .unwrap();
        names.push(format!("{server}__{longest}"));
    }
    names.push("chrome-devtools__take_screenshot".to_string());
    names
}

/// A host tool that answers after `ms` with what it was given, or fails saying `HOSTILE`.
fn slow_echo(ms: u64, fail: bool) -> HostTool {
    std::sync::Arc::new(move |input: Value| {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            match fail {
                true => json!({"error": format!("the branch is protected {HOSTILE}")}),
                false => json!({"result": {"ok": true, "echo": input}}),
            }
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = Value> + Send>>
    })
}

/// `POST /v1/exec_code` with the key.
async fn exec_with_key(s: &TestSidecar, key: &str, code: &str) -> Value {
    let r = s
        .http
        .post(s.url("/v1/exec_code"))
        .header("x-api-key", key)
        .json(&json!({"code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// Pairs of elements matching `selector` whose boxes overlap (by more than half a pixel each
/// way), with their texts; and how many were measured.
async fn overlaps(browser: &Browser, selector: &str) -> (Vec<Value>, usize) {
    let r = browser
        .script(&format!(
            "const els = [...document.querySelectorAll({selector:?})].filter(e => e.getClientRects().length); \
             const rs = els.map(e => e.getBoundingClientRect()); const out = []; \
             for (let i = 0; i < rs.length; i++) for (let j = i + 1; j < rs.length; j++) {{ \
               const a = rs[i], b = rs[j]; \
               if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5 && \
                   Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5) \
                 out.push([els[i].textContent, els[j].textContent]); }} \
             return [out, els.length]"
        ))
        .await;
    (
        r[0].as_array().cloned().unwrap_or_default(),
        r[1].as_u64().unwrap_or(0) as usize,
    )
}

/// A sidecar's own page, opened after eleven runs, shows them at once (the events kept since
/// start); its waterfall has a time axis and labels that never overlap, long names cut and
/// whole on hover; the opened run shows each call's arguments and result (events with bodies)
/// as text, the `<script>` and `<img onerror>` in them inert. Behind the API key throughout.
#[tokio::test]
async fn the_first_look_shows_earlier_runs_and_a_waterfall_of_long_names_that_never_overlap() {
    if !browser_installed() {
        return;
    }
    tokio::time::timeout(TEST_TIMEOUT, async {
        let names = real_long_names();
        let leak = |n: &str| -> &'static str { Box::leak(n.to_string().into_boxed_str()) };
        // Durations make a waterfall: the first alone, four at once, the last after them; two
        // calls are given markup, one fails with it in its message, the other echoes it.
        let plan: Vec<(&'static str, u64, bool, &str)> = vec![
            (leak(&names[0]), 40, false, "sites this token reaches"),
            (leak(&names[1]), 160, false, "LCPBreakdown"),
            (leak(&names[2]), 60, true, HOSTILE),
            (leak(&names[3]), 110, false, "/srv/reports"),
            (leak(&names[4]), 90, false, HOSTILE),
            (leak(&names[5]), 30, false, "full page"),
        ];
        let host = HostServer::start(plan.iter().map(|(n, ms, fail, _)| (*n, slow_echo(*ms, *fail))).collect()).await;
        let dir = TempDir::new("dash-names");
        let manifest = json!({
            "callback": {"url": host.url()},
            "tools": plan.iter().map(|(n, _, _, _)| json!({"name": n, "input_schema": {"type": "object",
                "properties": {"query": {"type": "string"}}}})).collect::<Vec<_>>(),
        });
        let tools = dir.write("tools.json", &manifest.to_string());
        let key = "dash-key-names";
        let s = TestSidecar::start(&[
            ("PTC_ENABLED", "true"),
            ("PTC_TOOLS_FILE", tools.to_str().unwrap()),
            ("PTC_EVENTS_BODIES", "true"),
            ("PTC_API_KEY", key),
        ])
        .await;
        // Eleven runs before anyone looks: ten small ones, then the waterfall.
        for i in 0..10 {
            let r = exec_with_key(&s, key, &format!("print('run {i}')")).await;
            assert_eq!(r["status"], "ok", "{r}");
        }
        let call = |i: usize| format!("call_tool({:?}, {{'query': {:?}}})", plan[i].0, plan[i].3);
        let code = format!(
            "await {}\nr = await asyncio.gather({}, {}, {}, {}, return_exceptions=True)\nawait {}\nprint({HOSTILE:?})",
            call(0), call(1), call(2), call(3), call(4), call(5)
        );
        let r = exec_with_key(&s, key, &code).await;
        assert_eq!(r["status"], "ok", "{r}");
        // The run's page is behind the key like the rest.
        let no_key = s.http.get(s.url("/v1/dashboard/run?agent=x&exec_id=r1")).send().await.unwrap();
        assert_eq!(no_key.status(), 401);

        let (_driver, driver) = start_chromedriver().await;
        let browser = Browser::open(&driver).await;
        browser.resize(1280, 1700).await;
        browser.go(&s.url("/dashboard")).await;
        browser
            .script(&format!("const k = document.getElementById('key'); k.value = {key:?}; k.onchange(); return 1"))
            .await;
        // The first answer has all eleven: no run happens after the page opened.
        let mut runs = Value::Null;
        for _ in 0..100 {
            runs = browser.script("return document.querySelectorAll('#runs tr').length").await;
            if runs != 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(runs, 11, "the first look shows the runs before it");
        // The newest run is open: its six calls, and their arguments and results.
        let mut shown = 0;
        for _ in 0..100 {
            shown = browser.script("return document.querySelectorAll('#detail .call').length").await.as_u64().unwrap_or(0);
            if shown == 6 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(shown, 6);
        tokio::time::sleep(Duration::from_millis(300)).await;
        browser.screenshot(&artifact("dashboard-names.png")).await;

        // No two labels of the waterfall overlap: names, durations, axis ticks.
        let (overlapping, measured) = overlaps(&browser, ".wf-name, .wf-dur, .wf-tick").await;
        assert!(overlapping.is_empty(), "overlapping labels: {overlapping:?}");
        assert!(measured >= 6 * 2 + 3, "{measured} labels measured");
        // Each label is one line of the row's height, inside its row.
        let rows = browser
            .script("return [...document.querySelectorAll('.wf-row')].map(r => { const n = r.querySelector('.wf-name'); \
                     const a = r.getBoundingClientRect(), b = n.getBoundingClientRect(); \
                     return [n.textContent, n.title, b.top >= a.top - 0.5 && b.bottom <= a.bottom + 0.5 && b.height < 20, \
                             n.scrollWidth > n.clientWidth, r.querySelector('.wf-bar').title]; })")
            .await;
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), 6, "{rows:?}");
        for (row, (name, _, _, _)) in rows.iter().zip(&plan) {
            assert_eq!((row[0].as_str(), row[1].as_str(), &row[2]), (Some(*name), Some(*name), &json!(true)), "{row}");
            assert!(row[4].as_str().unwrap().starts_with(&format!("{name} · ")), "{row}");
        }
        // The longest names do not fit their column: they are cut (and whole in the title).
        assert!(rows.iter().filter(|r| r[3] == true).count() >= 2, "{rows:?}");
        // The time axis: from 0, increasing, inside the track, at least three ticks.
        let ticks = browser
            .script("const t = document.querySelector('.wf-axis .wf-track').getBoundingClientRect(); \
                     return [...document.querySelectorAll('.wf-tick')].map(e => { const r = e.getBoundingClientRect(); \
                     return [e.textContent, r.left >= t.left - 0.5 && r.right <= t.right + 0.5]; })")
            .await;
        let ticks = ticks.as_array().unwrap();
        assert!(ticks.len() >= 3, "{ticks:?}");
        assert_eq!(ticks[0][0], "0 ms", "{ticks:?}");
        assert!(ticks.iter().all(|t| t[1] == true && t[0].as_str().unwrap().ends_with(" ms")), "{ticks:?}");
        // Parallel calls overlap on the axis; the failed one is red with its message.
        let failed = browser.script("return [...document.querySelectorAll('.wf-bar.failed')].map(b => b.title)").await;
        assert_eq!(failed.as_array().unwrap().len(), 1, "{failed}");
        assert!(failed[0].as_str().unwrap().starts_with(plan[2].0), "{failed}");

        // The opened run: each call's arguments and result as text, the markup in them inert.
        let calls = browser
            .script("return [...document.querySelectorAll('#detail .call')].map(c => [c.querySelector('.tool').textContent, \
                     c.querySelector('.call-args').textContent, (c.querySelector('.call-result') || c.querySelector('.call-error')).textContent])")
            .await;
        let calls = calls.as_array().unwrap();
        for (c, (name, _, fail, query)) in calls.iter().zip(&plan) {
            assert_eq!(c[0], *name);
            let args = c[1].as_str().unwrap();
            assert_eq!(serde_json::from_str::<Value>(args).unwrap(), json!({"query": query}), "{c}");
            let out = c[2].as_str().unwrap();
            match fail {
                true => assert_eq!(out, format!("the branch is protected {HOSTILE}"), "{c}"),
                false => assert_eq!(
                    serde_json::from_str::<Value>(out).unwrap(),
                    json!({"ok": true, "echo": {"query": query}}),
                    "{c}"
                ),
            }
        }
        // With the run side sending them: the run's code and stdout, as text.
        let shown = browser
            .script("return [document.getElementById('run-code').textContent, document.getElementById('run-stdout').textContent]")
            .await;
        assert_eq!(shown, json!([code, format!("{HOSTILE}\n")]));
        assert_eq!(browser.script(INJECTED).await, json!([0, 1, "undefined"]));
        // README's picture: the runs, the waterfall and the opened run's first calls.
        browser.resize(1280, 1160).await;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        browser.screenshot(&artifact("dashboard-first-look.png")).await;
        browser.close().await;
    })
    .await
    .unwrap();
}

/// A run's page from Redis (`ptc-sidecar dashboard`) with what events carry of it with
/// `PTC_EVENTS_BODIES`: its code, stdout and stderr as text, the markup in them inert, a
/// megabyte of output cut to its excerpt; the page and its data behind the key.
#[tokio::test]
async fn an_opened_run_shows_its_code_and_output_as_text_within_bounds() {
    if !browser_installed() {
        return;
    }
    tokio::time::timeout(TEST_TIMEOUT, async {
        let redis = TestRedis::any();
        let agent = unique("dash-hostile");
        let code = format!("# {HOSTILE}\nprint({HOSTILE:?})\n");
        let long_stderr = format!("{}\nValueError: {HOSTILE}", "warning: x\n".repeat(100_000));
        let now = ptc_sidecar::util::now_ms();
        let events = [
            json!({"type": "exec.started", "exec_id": "r7", "code_bytes": code.len(), "code": code}),
            json!({"type": "tool_call.started", "exec_id": "r7", "call_id": "r7-0", "tool": HOSTILE,
                   "source": "mcp", "args_bytes": 20, "args": {"q": HOSTILE}}),
            json!({"type": "tool_call.finished", "exec_id": "r7", "call_id": "r7-0", "tool": HOSTILE,
                   "source": "mcp", "ok": true, "duration_ms": 12.0, "result_bytes": 30, "result": HOSTILE}),
            json!({"type": "exec.finished", "exec_id": "r7", "status": "error", "ok": false, "duration_ms": 40.0,
                   "exit_code": 1, "stdout_bytes": HOSTILE.len() + 1, "stdout": format!("{HOSTILE}\n"),
                   "stderr_bytes": long_stderr.len(), "stderr": long_stderr}),
        ];
        let client = redis::Client::open(redis.url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        for (i, mut e) in events.into_iter().enumerate() {
            e["v"] = json!(1);
            e["agent_id"] = json!(agent);
            e["seq"] = json!(i);
            e["ts"] = json!(now + i as u64 * 10);
            let _: String = redis::cmd("XADD")
                .arg(format!("ptc:stream:{agent}"))
                .arg("*")
                .arg("event")
                .arg(e.to_string())
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let key = "dash-key-hostile";
        let (_dash, url) = crate::metrics::start_dashboard(&redis.url, &[("PTC_API_KEY", key)]).await;
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let run = format!("{url}/v1/dashboard/run?agent={agent}&exec_id=r7");
        assert_eq!(http.get(&run).send().await.unwrap().status(), 401);
        let whole: Value = http.get(&run).header("x-api-key", key).send().await.unwrap().json().await.unwrap();
        assert!(whole["stderr"].as_str().unwrap().len() < 4200, "{}", whole["stderr"]);
        let status = |path: String| {
            let http = http.clone();
            async move { http.get(path).header("x-api-key", key).send().await.unwrap().status().as_u16() }
        };
        assert_eq!(status(format!("{url}/v1/dashboard/run?agent={agent}&exec_id=r8")).await, 404);
        assert_eq!(status(format!("{url}/v1/dashboard/run?exec_id=r7")).await, 400);
        // The page: no script but its own (its policy names a nonce of this response).
        let page = http.get(format!("{url}/dashboard")).send().await.unwrap();
        let policy = page.headers()["content-security-policy"].to_str().unwrap().to_string();
        let html = page.text().await.unwrap();
        let nonce = policy.split("'nonce-").nth(1).and_then(|n| n.split('\'').next()).unwrap();
        assert!(html.contains(&format!("<script nonce=\"{nonce}\">")) && nonce.len() == 32, "{policy}");
        assert!(policy.contains("default-src 'none'") && !policy.contains("unsafe-eval"), "{policy}");

        let (_driver, driver) = start_chromedriver().await;
        let browser = Browser::open(&driver).await;
        browser.resize(1280, 1500).await;
        browser.go(&format!("{url}/dashboard")).await;
        browser
            .script(&format!("const k = document.getElementById('key'); k.value = {key:?}; k.onchange(); return 1"))
            .await;
        let mut shown = Value::Null;
        for _ in 0..100 {
            browser
                .script(&format!(
                    "const s = document.getElementById('f-agent'); if (s.value !== {agent:?} && [...s.options].some(o => o.value === {agent:?})) {{ s.value = {agent:?}; s.onchange(); }} return 1"
                ))
                .await;
            shown = browser
                .script("const t = (id) => (document.getElementById(id) || {}).textContent; \
                         return [t('run-code'), t('run-stdout'), t('run-stderr'), \
                                 [...document.querySelectorAll('#detail .call-args, #detail .call-result, #detail .tool')].map(e => e.textContent)]")
                .await;
            if shown[0].as_str().is_some_and(|c| c.contains("print")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(shown[0], code, "{shown}");
        assert_eq!(shown[1], format!("{HOSTILE}\n"), "{shown}");
        let stderr = shown[2].as_str().unwrap();
        assert!(stderr.starts_with("warning: x\n") && stderr.ends_with(&format!("ValueError: {HOSTILE}")), "{stderr}");
        assert!(stderr.len() < 4200 && stderr.contains(" bytes] …"), "{} bytes", stderr.len());
        assert_eq!(shown[3], json!([HOSTILE, json!({"q": HOSTILE}).to_string(), HOSTILE]), "{shown}");
        let page = browser.script("return document.body.innerText").await;
        assert!(page.as_str().unwrap().contains("exit code 1"), "{page}");
        assert_eq!(browser.script(INJECTED).await, json!([0, 1, "undefined"]));
        // The output's box shows its end, where the traceback is.
        let end = browser
            .script("const p = document.getElementById('run-stderr'); return p.scrollHeight > p.clientHeight && p.scrollTop + p.clientHeight >= p.scrollHeight - 2")
            .await;
        assert_eq!(end, true);
        browser.screenshot(&artifact("dashboard-run.png")).await;
        browser.close().await;
    })
    .await
    .unwrap();
}
