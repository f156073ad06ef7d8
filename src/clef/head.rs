//! The joint schema head (spec §2): weights and forward pass.
//!
//! Shapes (Clef-Flash numbers): T prompt tokens, H = 4096 backbone width, W = 1024 head width,
//! nh = 16 heads of dh = W/nh, F = 4096 FFN width, Q questions, O options over all questions.
//!
//! ```text
//! per hidden row (streamed, HeadInput::push_rows):
//!   Hn = LN(X; hidden_norm)            M = Hn·Wmem       [T×W]  kept
//!   span sums of Hn (questions q, options c), last row g            (Hn itself is dropped)
//! Head::scores:
//!   l_j = mean output.weight[token] over option j's tokens           [O×H]  (raw LM-head rows, lm_rows.rs)
//!   R = Woc·c + Wol·l + Woq·q[owner]                                 [O×W]
//!   routing blocks:  R += MHA(LN(R), LN(M));  R += FFN(R)            options read the prompt
//!   B = Wq·q;  S = softmax over own options (B·Rᵀ/√W);  F = B + LN(S·R) + Wg·g + type_emb   [Q×W]
//!   joint blocks:    F += MHA(LN(F), LN(F));  F += MHA(LN(F), M);  F += FFN(F);  F = LN(F; field_norm)
//!   score_j = s0·cos(l_j, q+g) + s2·(s1·cos(F_owner, LN(R_j)) + MLP([f; o; f⊙o; |f−o|]))
//! ```
//! MHA is PyTorch `nn.MultiheadAttention` (no mask, no positions, scale 1/√dh); FFN is
//! `down(GELU_erf(up(LN(x))))`; every LayerNorm has a bias, biased variance and the head's eps.
//!
//! Weights stay in their stored type (F32 / F16 / BF16 / Q8_0 / any ggml type): every product
//! with a weight matrix is [`ops::matmul`] — the same fused kernels as the backbone, including the
//! SIMD f32 / 16-bit-float dots, and Q8_0 activations in [`Precision::Fast`] as ggml-cpu does.
//! Activations and accumulators are f32 (LayerNorm statistics and span sums in f64).
//!
//! The tensors live either in the model's weight store (a `clef` GGUF: backbone + head) or in the
//! head's own store (`joint_head.safetensors`, see [`super::safetensors`]); both use the GGUF
//! names of spec §1.2.

use super::request::{QuestionType, TAG_NONE, TAG_OPTION};
use super::lm_rows::{self, LmRows};
use super::DecisionError;
use crate::gguf::Header;
use crate::model::Model;
use crate::ops::{self, matmul, Linear, MatmulScratch, Precision};
use crate::quant::float::dot_f32;
use crate::weights::{TensorView, WeightStore};

/// Hyper-parameters of a head.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadConfig {
    /// H: the backbone width the head reads.
    pub n_embd: usize,
    /// W.
    pub width: usize,
    /// nh (W must be a multiple).
    pub n_heads: usize,
    /// F.
    pub ffn: usize,
    /// R routing ("evidence") blocks, then J joint ("field") blocks.
    pub routing_blocks: usize,
    pub joint_blocks: usize,
    /// eps of every LayerNorm in the head.
    pub eps: f32,
}

/// Default LayerNorm eps (torch's, what the converter writes).
pub const HEAD_LAYER_NORM_EPS: f32 = 1e-5;

struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

/// y = W·x + b.
struct Affine {
    w: Linear,
    b: Vec<f32>,
}

struct Attn {
    q: Affine,
    k: Affine,
    v: Affine,
    o: Affine,
}

struct Block {
    /// Joint blocks only: self-attention among the question fields.
    self_attn: Option<(Norm, Attn)>,
    /// Query norm of the cross-attention.
    cross_norm: Norm,
    /// Routing blocks only: memory norm (joint blocks read the raw memory).
    cross_norm_kv: Option<Norm>,
    cross: Attn,
    ffn_norm: Norm,
    up: Affine,
    down: Affine,
}

/// A loaded joint schema head.
pub struct Head {
    pub config: HeadConfig,
    /// The head's own tensors (safetensors form); `None` = they are in the model's store.
    own: Option<WeightStore>,
    hidden_norm: Norm,
    proj_memory: Linear,
    proj_question: Linear,
    proj_option_question: Linear,
    proj_global: Linear,
    proj_option_context: Linear,
    proj_option_lexical: Linear,
    /// [3 × W]: rows noul, choice, score.
    token_types: Vec<f32>,
    option_summary_norm: Norm,
    field_norm: Norm,
    option_norm: Norm,
    scorer: Affine,
    scorer_out: Affine,
    /// [prior scale, joint (cosine) scale, residual gate], as used at inference.
    scales: [f32; 3],
    blocks: Vec<Block>,
}

fn bad(msg: String) -> DecisionError {
    DecisionError::BadHead(msg)
}

/// Tensor lookup with shape checks (GGUF names, ggml `ne` order).
struct Tensors<'a> {
    store: &'a WeightStore,
}

impl Tensors<'_> {
    fn get(&self, name: &str, dims: &[usize]) -> Result<TensorView, DecisionError> {
        let t = self
            .store
            .find(name)
            .ok_or_else(|| bad(format!("the head has no tensor {name}")))?;
        // Trailing 1s are equivalent ({W, 1} and {W} for scorer_out).
        let trim = |d: &[usize]| -> Vec<usize> {
            let mut v = d.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        if trim(&t.dims) != trim(dims) {
            return Err(bad(format!(
                "head tensor {name} has shape {:?}, expected {dims:?}",
                t.dims
            )));
        }
        if !crate::quant::is_supported(t.ty) {
            return Err(bad(format!(
                "head tensor {name} has type {} which this build cannot run",
                t.ty
            )));
        }
        Ok(t.clone())
    }

    fn vec(&self, name: &str, n: usize) -> Result<Vec<f32>, DecisionError> {
        Ok(ops::load_f32(self.store, &self.get(name, &[n])?))
    }

    fn lin(&self, name: &str, n_in: usize, n_out: usize) -> Result<Linear, DecisionError> {
        let t = self.get(name, &[n_in, n_out])?;
        // Quantized products group activations by 32 (Q8_0 / Q8_1) or 256 (Q8_K).
        let block = match t.ty.act_kind() {
            crate::quant::ActKind::Q8K => 256,
            crate::quant::ActKind::F32 => 1,
            _ => 32,
        };
        if n_in % block != 0 || n_in % t.ty.block_elems() != 0 {
            return Err(bad(format!(
                "head tensor {name}: row length {n_in} does not fit the {} blocks",
                t.ty
            )));
        }
        Ok(Linear::new(t))
    }

    fn norm(&self, name: &str, n: usize) -> Result<Norm, DecisionError> {
        Ok(Norm {
            w: self.vec(&format!("{name}.weight"), n)?,
            b: self.vec(&format!("{name}.bias"), n)?,
        })
    }

    fn affine(&self, name: &str, n_in: usize, n_out: usize) -> Result<Affine, DecisionError> {
        Ok(Affine {
            w: self.lin(&format!("{name}.weight"), n_in, n_out)?,
            b: self.vec(&format!("{name}.bias"), n_out)?,
        })
    }

    fn attn(&self, prefix: &str, w: usize) -> Result<Attn, DecisionError> {
        let a = |x: &str| self.affine(&format!("{prefix}_{x}"), w, w);
        Ok(Attn {
            q: a("q")?,
            k: a("k")?,
            v: a("v")?,
            o: a("o")?,
        })
    }
}

impl HeadConfig {
    /// Reads a `clef` GGUF's decision keys (spec §1.1); W and F come from tensor shapes.
    /// A file without `{arch}.decision.type` is not a decision model.
    pub fn from_header(h: &Header, n_embd: usize) -> Result<HeadConfig, DecisionError> {
        let arch = h.architecture().unwrap_or_default();
        let k = |s: &str| format!("{arch}.{s}");
        let family = h.get_str(&k("decision.type")).ok_or_else(|| {
            DecisionError::NotDecisionModel(format!(
                "this {arch} model has no decision head (no {arch}.decision.type): give its joint_head.safetensors"
            ))
        })?;
        if family != "clef" {
            return Err(DecisionError::NotDecisionModel(format!(
                "decision family '{family}' is not supported (only the clef joint schema head)"
            )));
        }
        let req_u = |s: &str| -> Result<usize, DecisionError> {
            h.get_u64(&k(s))
                .map(|v| v as usize)
                .ok_or_else(|| bad(format!("missing or invalid key {}", k(s))))
        };
        let dim = |name: &str, i: usize| -> Result<usize, DecisionError> {
            h.tensor(name)
                .and_then(|t| t.dims.get(i))
                .map(|&d| d as usize)
                .ok_or_else(|| bad(format!("the head has no tensor {name}")))
        };
        let cfg = HeadConfig {
            n_embd,
            width: dim("decision.proj_memory.weight", 1)?,
            n_heads: req_u("decision.head_count")?,
            ffn: dim("dec.blk.0.ffn_up.weight", 1)?,
            routing_blocks: req_u("decision.routing_block_count")?,
            joint_blocks: req_u("decision.block_count")?,
            eps: h
                .get_f32(&k("attention.layer_norm_epsilon"))
                .ok_or_else(|| bad(format!("missing key {}", k("attention.layer_norm_epsilon"))))?,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), DecisionError> {
        let dims = [self.n_embd, self.width, self.n_heads, self.ffn];
        if dims.iter().any(|&d| d == 0 || d > 1 << 20) || self.routing_blocks + self.joint_blocks > 256 {
            return Err(bad(format!("implausible head dimensions {self:?}")));
        }
        if self.width % self.n_heads != 0 {
            return Err(bad(format!(
                "head width {} is not a multiple of {} heads",
                self.width, self.n_heads
            )));
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return Err(bad(format!("LayerNorm eps {} is not positive", self.eps)));
        }
        Ok(())
    }

    /// Number of head tensors (GGUF form): 20 top-level, 18 per routing and 26 per joint block.
    pub fn n_tensors(&self) -> usize {
        20 + 18 * self.routing_blocks + 26 * self.joint_blocks
    }
}

impl Head {
    /// Builds the head over the tensors in `own` (safetensors form) or, when `own` is `None`, in
    /// the model's store (a `clef` GGUF).
    pub fn new(config: HeadConfig, model: &Model, own: Option<WeightStore>) -> Result<Head, DecisionError> {
        config.validate()?;
        if config.n_embd != model.config.n_embd {
            return Err(bad(format!(
                "the head reads {} wide hidden states, the backbone has {}",
                config.n_embd, model.config.n_embd
            )));
        }
        if own.as_ref().is_some_and(|s| !s.is_filled()) {
            return Err(bad("the head's weights are not completely loaded".into()));
        }
        let t = Tensors {
            store: own.as_ref().unwrap_or(&model.store),
        };
        let (h, w, f) = (config.n_embd, config.width, config.ffn);
        let mut blocks = Vec::with_capacity(config.routing_blocks + config.joint_blocks);
        for il in 0..config.routing_blocks + config.joint_blocks {
            let p = |s: &str| format!("dec.blk.{il}.{s}");
            let routing = il < config.routing_blocks;
            blocks.push(Block {
                self_attn: if routing {
                    None
                } else {
                    Some((t.norm(&p("attn_norm"), w)?, t.attn(&p("attn"), w)?))
                },
                cross_norm: t.norm(&p("cross_attn_norm"), w)?,
                cross_norm_kv: if routing {
                    Some(t.norm(&p("cross_attn_norm_kv"), w)?)
                } else {
                    None
                },
                cross: t.attn(&p("cross_attn"), w)?,
                ffn_norm: t.norm(&p("ffn_norm"), w)?,
                up: t.affine(&p("ffn_up"), w, f)?,
                down: t.affine(&p("ffn_down"), f, w)?,
            });
        }
        let tt = t.get("token_types.weight", &[w, 3])?;
        let scales_v = t.vec("decision.scales", 3)?;
        let scales = [scales_v[0], scales_v[1], scales_v[2]];
        if scales.iter().any(|s| !s.is_finite()) {
            return Err(bad(format!("decision.scales {scales:?} are not finite")));
        }
        let head = Head {
            hidden_norm: t.norm("decision.hidden_norm", h)?,
            proj_memory: t.lin("decision.proj_memory.weight", h, w)?,
            proj_question: t.lin("decision.proj_question.weight", h, w)?,
            proj_option_question: t.lin("decision.proj_option_question.weight", h, w)?,
            proj_global: t.lin("decision.proj_global.weight", h, w)?,
            proj_option_context: t.lin("decision.proj_option_context.weight", h, w)?,
            proj_option_lexical: t.lin("decision.proj_option_lexical.weight", h, w)?,
            token_types: ops::load_f32(t.store, &tt),
            option_summary_norm: t.norm("decision.option_summary_norm", w)?,
            field_norm: t.norm("decision.field_norm", w)?,
            option_norm: t.norm("decision.option_norm", w)?,
            scorer: t.affine("decision.scorer", 4 * w, w)?,
            scorer_out: t.affine("decision.scorer_out", w, 1)?,
            scales,
            blocks,
            config,
            own: None,
        };
        Ok(Head { own, ..head })
    }

    /// Bytes of head weights held outside the model's store.
    pub fn own_bytes(&self) -> u64 {
        self.own.as_ref().map_or(0, |s| s.total_bytes())
    }

    pub fn scales(&self) -> [f32; 3] {
        self.scales
    }

    fn store<'a>(&'a self, model: &'a Model) -> &'a WeightStore {
        self.own.as_ref().unwrap_or(&model.store)
    }
}

// ---------------------------------------------------------------------------------------------
// Spans

/// A half-open token range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn len(&self) -> usize {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The question and option spans of a tag sequence (`clef_get_spans`, spec §2.2).
#[derive(Clone, Debug, PartialEq)]
pub struct Spans {
    pub questions: Vec<(Span, QuestionType)>,
    /// Options in prompt order, each with the index of its question.
    pub options: Vec<(Span, usize)>,
}

impl Spans {
    /// Runs of equal non-zero tags are spans; an option belongs to the last question before it.
    /// Invalid (llama.cpp scores NaN, the server answers 500): a tag outside 0..4, an option
    /// before any question, no question, or a question without options.
    pub fn from_tags(tags: &[u8]) -> Result<Spans, DecisionError> {
        let fail = |m: String| DecisionError::Evaluation(format!("the model could not evaluate the decision: {m}"));
        let mut s = Spans {
            questions: Vec::new(),
            options: Vec::new(),
        };
        let mut i = 0;
        while i < tags.len() {
            let tag = tags[i];
            let start = i;
            while i < tags.len() && tags[i] == tag {
                i += 1;
            }
            let span = Span { start, end: i };
            match tag {
                TAG_NONE => {}
                1..=3 => {
                    let ty = [QuestionType::Noul, QuestionType::Choice, QuestionType::Score][tag as usize - 1];
                    s.questions.push((span, ty));
                }
                TAG_OPTION => {
                    if s.questions.is_empty() {
                        return Err(fail(format!(
                            "an option span at token {start} comes before any question"
                        )));
                    }
                    s.options.push((span, s.questions.len() - 1));
                }
                other => return Err(fail(format!("order tag {other} at token {start} is outside 0..4"))),
            }
        }
        if s.questions.is_empty() {
            return Err(fail("the prompt has no question span".into()));
        }
        for k in 0..s.questions.len() {
            if !s.options.iter().any(|&(_, o)| o == k) {
                return Err(fail(format!("question span {} has no option", k + 1)));
            }
        }
        Ok(s)
    }

    /// Options of question `k`, as indices into `options`.
    pub fn options_of(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        self.options
            .iter()
            .enumerate()
            .filter(move |(_, &(_, o))| o == k)
            .map(|(j, _)| j)
    }
}

// ---------------------------------------------------------------------------------------------
// Streaming input

/// What the head keeps of the backbone's hidden rows, filled chunk by chunk (spec §6.1): memory
/// rows, span sums and the last row. 4·W bytes per token instead of 4·H.
pub struct HeadInput {
    pub spans: Spans,
    /// For each token: 0 = not pooled, 1 + k = question k, 1 + Q + j = option j.
    slot: Vec<u32>,
    /// M = LN(X)·Wmemᵀ: rows seen × W.
    pub memory: Vec<f32>,
    /// Σ LN(X) rows per question span [Q × H] and per option span [O × H].
    q_sum: Vec<f64>,
    c_sum: Vec<f64>,
    /// LN(X) of the last row seen [H].
    last: Vec<f32>,
    /// Rows seen so far.
    pub n_rows: usize,
}

impl HeadInput {
    pub fn n_tokens(&self) -> usize {
        self.slot.len()
    }
}

impl Head {
    /// The LM-head rows [`Head::scores`] reads for a prompt: its option spans' tokens (sorted, unique).
    pub fn lexical_ids(input: &HeadInput, tokens: &[u32]) -> Vec<u32> {
        lm_rows::needed(input.spans.options.iter().flat_map(|(span, _)| tokens[span.start..span.end].iter().copied()))
    }

    /// Starts a pass over a prompt with these order tags.
    pub fn begin(&self, tags: &[u8]) -> Result<HeadInput, DecisionError> {
        let spans = Spans::from_tags(tags)?;
        let (q, o, h) = (spans.questions.len(), spans.options.len(), self.config.n_embd);
        let mut slot = vec![0u32; tags.len()];
        for (k, (sp, _)) in spans.questions.iter().enumerate() {
            slot[sp.start..sp.end].fill(1 + k as u32);
        }
        for (j, (sp, _)) in spans.options.iter().enumerate() {
            slot[sp.start..sp.end].fill((1 + q + j) as u32);
        }
        Ok(HeadInput {
            spans,
            slot,
            memory: Vec::with_capacity(tags.len() * self.config.width),
            q_sum: vec![0.0; q * h],
            c_sum: vec![0.0; o * h],
            last: vec![0.0; h],
            n_rows: 0,
        })
    }

    /// Continues from memory rows computed earlier for the first `n` tokens of the same prompt
    /// (a cached state prefix). Those tokens must not belong to any span.
    pub fn resume(&self, input: &mut HeadInput, memory_prefix: &[f32]) {
        let n = memory_prefix.len() / self.config.width;
        assert!(
            input.n_rows == 0 && input.slot[..n].iter().all(|&s| s == 0),
            "a cached prefix must be untagged"
        );
        input.memory.extend_from_slice(memory_prefix);
        input.n_rows = n;
    }

    /// Feeds the backbone's final-norm hidden rows (`rows × H`) for the next tokens.
    pub fn push_rows(
        &self,
        model: &Model,
        input: &mut HeadInput,
        hidden: &[f32],
        prec: Precision,
        mm: &mut MatmulScratch,
    ) {
        let (h, w) = (self.config.n_embd, self.config.width);
        let n = hidden.len() / h;
        assert!(
            input.n_rows + n <= input.slot.len(),
            "more hidden rows than prompt tokens"
        );
        let mut hn = hidden.to_vec();
        layer_norm(&mut hn, &self.hidden_norm, self.config.eps);
        let at = input.memory.len();
        input.memory.resize(at + n * w, 0.0);
        matmul(
            self.store(model),
            &self.proj_memory,
            &hn,
            &mut input.memory[at..],
            prec,
            mm,
        );
        let q = input.spans.questions.len();
        for (r, row) in hn.chunks_exact(h).enumerate() {
            let slot = input.slot[input.n_rows + r] as usize;
            let sum = match slot {
                0 => None,
                s if s <= q => Some(&mut input.q_sum[(s - 1) * h..s * h]),
                s => Some(&mut input.c_sum[(s - 1 - q) * h..(s - q) * h]),
            };
            if let Some(sum) = sum {
                for (a, &x) in sum.iter_mut().zip(row) {
                    *a += x as f64;
                }
            }
        }
        input.last.copy_from_slice(&hn[(n - 1) * h..]);
        input.n_rows += n;
    }

    /// The head's score for every option span, in prompt order (`tokens` = the prompt's ids,
    /// for the lexical rows, which `lm` holds: see [`Head::lexical_ids`]). Every row must have
    /// been pushed.
    pub fn scores(
        &self,
        model: &Model,
        input: &HeadInput,
        tokens: &[u32],
        lm: &LmRows,
        prec: Precision,
        mm: &mut MatmulScratch,
    ) -> Vec<f32> {
        assert_eq!(input.n_rows, input.slot.len(), "the head needs every hidden row");
        assert_eq!(tokens.len(), input.slot.len());
        let c = &self.config;
        let (h, w) = (c.n_embd, c.width);
        let store = self.store(model);
        let sp = &input.spans;
        let (nq, no) = (sp.questions.len(), sp.options.len());
        let mean = |sum: &[f64], n: usize| -> Vec<f32> { sum.iter().map(|&s| (s / n as f64) as f32).collect() };

        // Pooled inputs: q [Q×H], c [O×H], l [O×H], g [H].
        let mut q = Vec::with_capacity(nq * h);
        for (k, (span, _)) in sp.questions.iter().enumerate() {
            q.extend(mean(&input.q_sum[k * h..(k + 1) * h], span.len()));
        }
        let mut cm = Vec::with_capacity(no * h);
        let mut l = Vec::with_capacity(no * h);
        let mut row = vec![0.0f32; h];
        for (j, (span, _)) in sp.options.iter().enumerate() {
            cm.extend(mean(&input.c_sum[j * h..(j + 1) * h], span.len()));
            let mut acc = vec![0.0f64; h];
            for &tok in &tokens[span.start..span.end] {
                lm.row(tok, &mut row);
                for (a, &x) in acc.iter_mut().zip(&row) {
                    *a += x as f64;
                }
            }
            l.extend(mean(&acc, span.len()));
        }
        let g = &input.last;
        let owner: Vec<usize> = sp.options.iter().map(|&(_, k)| k).collect();

        // Option slots R = Woc·c + Wol·l + Woq·q[owner]   [O×W].
        let mut r = vec![0.0f32; no * w];
        matmul(store, &self.proj_option_context, &cm, &mut r, prec, mm);
        let mut tmp = vec![0.0f32; no * w];
        matmul(store, &self.proj_option_lexical, &l, &mut tmp, prec, mm);
        add(&mut r, &tmp);
        let mut oq = vec![0.0f32; nq * w];
        matmul(store, &self.proj_option_question, &q, &mut oq, prec, mm);
        for (j, &k) in owner.iter().enumerate() {
            add(&mut r[j * w..(j + 1) * w], &oq[k * w..(k + 1) * w]);
        }

        // Routing blocks: options read the (normalised) memory.
        let memory = &input.memory;
        for b in &self.blocks[..c.routing_blocks] {
            let mut rn = r.clone();
            layer_norm(&mut rn, &b.cross_norm, c.eps);
            let mut mn = memory.clone();
            layer_norm(&mut mn, b.cross_norm_kv.as_ref().expect("routing block"), c.eps);
            add(&mut r, &self.mha(store, &b.cross, &rn, &mn, prec, mm));
            let d = self.ffn(store, b, &r, prec, mm);
            add(&mut r, &d);
        }

        // Fields: F = B + LN(S·R) + Wg·g + type embedding   [Q×W].
        let mut f = vec![0.0f32; nq * w];
        matmul(store, &self.proj_question, &q, &mut f, prec, mm);
        let mut summary = vec![0.0f32; nq * w];
        let inv_sqrt_w = 1.0 / (w as f32).sqrt();
        for k in 0..nq {
            let own: Vec<usize> = sp.options_of(k).collect();
            let bk = &f[k * w..(k + 1) * w];
            let mut att: Vec<f32> = own
                .iter()
                .map(|&j| dot_f32(bk, &r[j * w..(j + 1) * w]) * inv_sqrt_w)
                .collect();
            softmax(&mut att);
            let sk = &mut summary[k * w..(k + 1) * w];
            for (&j, &a) in own.iter().zip(&att) {
                for (s, &x) in sk.iter_mut().zip(&r[j * w..(j + 1) * w]) {
                    *s += a * x;
                }
            }
        }
        layer_norm(&mut summary, &self.option_summary_norm, c.eps);
        add(&mut f, &summary);
        let mut gw = vec![0.0f32; w];
        matmul(store, &self.proj_global, g, &mut gw, prec, mm);
        for (k, (_, ty)) in sp.questions.iter().enumerate() {
            let fk = &mut f[k * w..(k + 1) * w];
            add(fk, &gw);
            add(fk, &self.token_types[ty.index() * w..(ty.index() + 1) * w]);
        }

        // Joint blocks: fields read each other, then the raw memory.
        for b in &self.blocks[c.routing_blocks..] {
            let (norm, attn) = b.self_attn.as_ref().expect("joint block");
            let mut x = f.clone();
            layer_norm(&mut x, norm, c.eps);
            add(&mut f, &self.mha(store, attn, &x, &x, prec, mm));
            let mut x = f.clone();
            layer_norm(&mut x, &b.cross_norm, c.eps);
            add(&mut f, &self.mha(store, &b.cross, &x, memory, prec, mm));
            let d = self.ffn(store, b, &f, prec, mm);
            add(&mut f, &d);
        }
        layer_norm(&mut f, &self.field_norm, c.eps);

        // Scorer.
        let mut o = r.clone();
        layer_norm(&mut o, &self.option_norm, c.eps);
        let mut feat = vec![0.0f32; no * 4 * w]; // [f ; o ; f⊙o ; |f−o|]
        let mut prior = vec![0.0f32; no];
        let mut cos = vec![0.0f32; no];
        let mut qg = vec![0.0f32; h];
        for (j, &k) in owner.iter().enumerate() {
            let (fj, oj) = (&f[k * w..(k + 1) * w], &o[j * w..(j + 1) * w]);
            let fe = &mut feat[j * 4 * w..(j + 1) * 4 * w];
            for i in 0..w {
                fe[i] = fj[i];
                fe[w + i] = oj[i];
                fe[2 * w + i] = fj[i] * oj[i];
                fe[3 * w + i] = (fj[i] - oj[i]).abs();
            }
            cos[j] = cosine(fj, oj);
            for ((a, &x), &y) in qg.iter_mut().zip(&q[k * h..(k + 1) * h]).zip(g) {
                *a = x + y;
            }
            prior[j] = cosine(&l[j * h..(j + 1) * h], &qg);
        }
        let mut hid = affine(store, &self.scorer, &feat, prec, mm);
        hid.iter_mut().for_each(|x| *x = gelu_erf(*x));
        let resid = affine(store, &self.scorer_out, &hid, prec, mm);
        let [s0, s1, s2] = self.scales;
        (0..no).map(|j| s0 * prior[j] + s2 * (s1 * cos[j] + resid[j])).collect()
    }

    /// `nn.MultiheadAttention(qin [Nq×W], kvin [Nk×W])`: no mask, scale 1/√dh.
    fn mha(
        &self,
        store: &WeightStore,
        a: &Attn,
        qin: &[f32],
        kvin: &[f32],
        prec: Precision,
        mm: &mut MatmulScratch,
    ) -> Vec<f32> {
        let (w, nh) = (self.config.width, self.config.n_heads);
        let dh = w / nh;
        let qm = affine(store, &a.q, qin, prec, mm); // Nq × W
        let km = affine(store, &a.k, kvin, prec, mm); // Nk × W
        let vm = affine(store, &a.v, kvin, prec, mm); // Nk × W
        let (nq, nk) = (qin.len() / w, kvin.len() / w);
        let scale = 1.0 / (dh as f32).sqrt();
        let mut out = vec![0.0f32; nq * w];
        let mut p = vec![0.0f32; nk];
        for i in 0..nq {
            for hh in 0..nh {
                let qi = &qm[i * w + hh * dh..][..dh];
                for (t, pt) in p.iter_mut().enumerate() {
                    *pt = dot_f32(qi, &km[t * w + hh * dh..][..dh]) * scale;
                }
                softmax(&mut p);
                let oi = &mut out[i * w + hh * dh..][..dh];
                for (t, &pt) in p.iter().enumerate() {
                    for (o, &v) in oi.iter_mut().zip(&vm[t * w + hh * dh..][..dh]) {
                        *o += pt * v;
                    }
                }
            }
        }
        affine(store, &a.o, &out, prec, mm)
    }

    /// `down(GELU_erf(up(LN(x; ffn_norm))))`.
    fn ffn(&self, store: &WeightStore, b: &Block, x: &[f32], prec: Precision, mm: &mut MatmulScratch) -> Vec<f32> {
        let mut xn = x.to_vec();
        layer_norm(&mut xn, &b.ffn_norm, self.config.eps);
        let mut u = affine(store, &b.up, &xn, prec, mm);
        u.iter_mut().for_each(|v| *v = gelu_erf(*v));
        affine(store, &b.down, &u, prec, mm)
    }
}

/// `x·Wᵀ + b` for rows of x.
fn affine(store: &WeightStore, a: &Affine, x: &[f32], prec: Precision, mm: &mut MatmulScratch) -> Vec<f32> {
    let n = x.len() / a.w.n_in;
    let mut y = vec![0.0f32; n * a.w.n_out];
    matmul(store, &a.w, x, &mut y, prec, mm);
    for row in y.chunks_exact_mut(a.w.n_out) {
        add(row, &a.b);
    }
    y
}

fn add(a: &mut [f32], b: &[f32]) {
    for (x, &y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// LayerNorm of each row in place (`ggml_norm` then affine): (x − μ)/√(σ² + eps)·w + b, with the
/// biased variance; statistics in f64.
fn layer_norm(x: &mut [f32], n: &Norm, eps: f32) {
    let d = n.w.len();
    for row in x.chunks_exact_mut(d) {
        let mu = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
        let var = row.iter().map(|&v| (v as f64 - mu) * (v as f64 - mu)).sum::<f64>() / d as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for ((v, &w), &b) in row.iter_mut().zip(&n.w).zip(&n.b) {
            *v = ((*v as f64 - mu) * inv) as f32 * w + b;
        }
    }
}

/// Softmax in place, max subtracted.
fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

/// ⟨a/‖a‖, b/‖b‖⟩ with ‖·‖ floored at 1e-12 (`ggml_l2_norm`).
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let na = (dot_f32(a, a).sqrt()).max(1e-12);
    let nb = (dot_f32(b, b).sqrt()).max(1e-12);
    dot_f32(a, b) / (na * nb)
}

/// GELU, exact erf form: x/2 · (1 + erf(x/√2)).
pub fn gelu_erf(x: f32) -> f32 {
    let x = x as f64;
    (0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32
}

/// erf in f64 (|error| < 1e-15): the Maclaurin series below 2.5, else 1 − erfc from its
/// continued fraction erfc(a) = e^(−a²)/√π · 1/(a + ½/(a + 1/(a + 3/2/(a + …)))).
pub fn erf(x: f64) -> f64 {
    let a = x.abs();
    let two_over_sqrt_pi = std::f64::consts::FRAC_2_SQRT_PI;
    let r = if a < 2.5 {
        let a2 = a * a;
        let (mut term, mut sum) = (a, a);
        let mut n = 0.0f64;
        loop {
            n += 1.0;
            term *= -a2 / n;
            let t = term / (2.0 * n + 1.0);
            sum += t;
            if t.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * two_over_sqrt_pi
    } else {
        let mut t = a;
        for k in (1..=80).rev() {
            t = a + (k as f64 * 0.5) / t;
        }
        1.0 - (-a * a).exp() / (std::f64::consts::PI.sqrt() * t)
    };
    r.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn erf_values() {
        // Python math.erf.
        let cases = [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (2.4999, 0.9995928300996666),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (4.0, 0.9999999845827421),
            (-1.5, -0.9661051464753108),
            (6.0, 1.0),
        ];
        for (x, want) in cases {
            assert!((erf(x) - want).abs() < 1e-14, "erf({x}) = {} want {want}", erf(x));
        }
    }

    #[test]
    fn spans_rules() {
        let s = Spans::from_tags(&[0, 2, 2, 0, 4, 4, 0, 4, 0, 1, 0, 4, 0]).unwrap();
        assert_eq!(
            s.questions,
            vec![
                (Span { start: 1, end: 3 }, QuestionType::Choice),
                (Span { start: 9, end: 10 }, QuestionType::Noul)
            ]
        );
        assert_eq!(
            s.options,
            vec![
                (Span { start: 4, end: 6 }, 0),
                (Span { start: 7, end: 8 }, 0),
                (Span { start: 11, end: 12 }, 1)
            ]
        );
        // Adjacent option runs merge into one span.
        assert_eq!(Spans::from_tags(&[3, 0, 4, 4, 4]).unwrap().options.len(), 1);
        for bad in [&[4u8, 0, 1, 0, 4][..], &[0, 0], &[1, 0, 4, 0, 2], &[1, 0, 5]] {
            assert_eq!(
                Spans::from_tags(bad).unwrap_err().code(),
                "evaluation_failed",
                "{bad:?}"
            );
        }
    }
}
