//! The dashboard in a real browser: Debian's headless Chromium, driven over WebDriver
//! (chromedriver's W3C protocol, spoken with reqwest). Two sidecars publish to a real Redis as
//! two agents; `ptc-sidecar dashboard` serves their page; the test waits until the page shows
//! both agents, the run with parallel calls and a failing one, its calls in the waterfall
//! (overlapping bars) and the error text, and saves a screenshot as a test artifact
//! (`target/test-artifacts/dashboard.png`). scripts/test installs chromium and chromedriver;
//! without them the test says so and passes nothing off as tested.

use crate::common::{TEST_TIMEOUT, TestRedis, unique};
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
