//! The `clef` command line, shared word for word by the native binary (`src/bin/clef.rs`) and
//! the wasm build under Node (`www/cli.mjs`): same commands, same output.
//!
//! ```text
//! clef info     --model F
//! clef logits   --model F --tokens 1,2,3 [--all] [--precision fast|exact] [--layout auto|plain]
//! clef generate --model F (--tokens IDS | --prompt TEXT [--chat] [--no-think]) --max-tokens N
//!               [--temperature T] [--seed S] [--top-k K] [--top-p P] [--min-p P]
//!               [--repeat-penalty R] [--ignore-eos] [--json] [--ctx N] [--precision fast|exact] [--layout auto|plain] [--streams auto|on|off]
//!               [--gemm-dot auto|pairs|quads]
//! clef tokenize --model F --text TEXT [--special]
//! clef decide   --model F [--head joint_head.safetensors [--head-config joint_head_config.json]] --request R.json
//! clef bench-decide --model F --head joint_head.safetensors [--tokens 300] [--runs 3] [--precision fast|exact]
//! clef bench-kernels [--json] [--type T] [--ms MS] [--rows R] [--prefill T [--shape ROWSxCOLS]] [--gemm narrow|wide] [--dot pairs|quads]
//! clef bench-grammar --vocab F (--schema S.json | --tools T.json | --json-object) [--tokens N] [--walks W] [--seed S]
//! ```

use crate::chat::{simple_messages, ChatInput, ChatTemplate};
use crate::gguf::Header;
use crate::json;
use crate::loader::{self, ByteSource};
use crate::engine::{Engine, GenParams};
use crate::model::{Logits, Model, Scratch};
use crate::ops::Precision;
use crate::quant::GgmlType;
use crate::sampler::SamplerParams;
use crate::tokenizer::Tokenizer;
use std::collections::BTreeMap;

/// What the command line needs from its environment.
pub trait Host {
    /// Opens a model file for ranged reads.
    fn open(&mut self, path: &str) -> Result<Box<dyn ByteSource>, String>;
    /// Writes to standard output (streamed: called once per generated piece).
    fn out(&mut self, s: &str);
    /// Writes a notice for the person running the command (standard error).
    fn note(&mut self, s: &str);
}

pub const USAGE: &str = "usage: clef <info|logits|generate|tokenize|decide|bench-kernels|self-test> [options]
  info          --model F
  logits        --model F --tokens 1,2,3 [--all] [--precision fast|exact] [--layout auto|plain]
  generate      --model F (--tokens IDS | --prompt TEXT [--chat] [--no-think]) --max-tokens N
                [--temperature T] [--seed S] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]
                [--ignore-eos] [--json] [--ctx N] [--precision fast|exact] [--layout auto|plain] [--streams auto|on|off]
                [--gemm-dot auto|pairs|quads]
  tokenize      --model F --text TEXT [--special]
  decide        --model F [--head joint_head.safetensors [--head-config joint_head_config.json]] --request R.json
                [--precision fast|exact]   (SystemOne request JSON in, response JSON out)
  bench-decide  --model F --head joint_head.safetensors [--tokens 300] [--runs 3] [--precision fast|exact]
                (a decision of about N prompt tokens vs the plain prompt of the same tokens; JSON)
  bench-kernels [--json] [--type T] [--ms MS] [--rows R] [--prefill TOKENS [--shape ROWSxCOLS]] [--gemm narrow|wide] [--dot pairs|quads]
  bench-grammar --vocab F (--schema S.json | --tools T.json | --json-object) [--tokens N] [--walks W] [--seed S]
                (constrained decoding over F's vocabulary: build, compile and per-token mask times; JSON)
  self-test     [--rows N]   (fast kernels vs scalar references in this build; JSON, exit 1 on a mismatch)";

/// Parsed `--key value` / `--flag` options.
struct Args {
    cmd: String,
    opts: BTreeMap<String, Option<String>>,
}

const FLAGS: &[&str] = &["all", "chat", "no-think", "json", "special", "ignore-eos", "json-object"];

impl Args {
    fn parse(args: &[String]) -> Result<Args, String> {
        let cmd = args.first().ok_or_else(|| USAGE.to_string())?.clone();
        let mut opts = BTreeMap::new();
        let mut i = 1;
        while i < args.len() {
            let key = args[i].strip_prefix("--").ok_or_else(|| format!("unexpected argument '{}'", args[i]))?;
            if FLAGS.contains(&key) {
                opts.insert(key.to_string(), None);
                i += 1;
            } else {
                let v = args.get(i + 1).ok_or_else(|| format!("--{key} needs a value"))?;
                opts.insert(key.to_string(), Some(v.clone()));
                i += 2;
            }
        }
        Ok(Args { cmd, opts })
    }
    fn flag(&self, k: &str) -> bool {
        self.opts.contains_key(k)
    }
    fn get(&self, k: &str) -> Option<&str> {
        self.opts.get(k).and_then(|v| v.as_deref())
    }
    fn req(&self, k: &str) -> Result<&str, String> {
        self.get(k).ok_or_else(|| format!("{} needs --{k}", self.cmd))
    }
    fn num<T: std::str::FromStr>(&self, k: &str, default: T) -> Result<T, String> {
        match self.get(k) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{k}: '{v}' is not a valid number")),
        }
    }
    fn precision(&self) -> Result<Precision, String> {
        match self.get("precision") {
            None => Ok(Precision::Fast),
            Some(p) => Precision::parse(p).ok_or_else(|| format!("--precision must be fast or exact, not '{p}'")),
        }
    }
    fn check_known(&self, known: &[&str]) -> Result<(), String> {
        for k in self.opts.keys() {
            if !known.contains(&k.as_str()) {
                return Err(format!("{}: unknown option --{k}", self.cmd));
            }
        }
        Ok(())
    }
}

fn parse_ids(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| p.trim().parse::<u32>().map_err(|_| format!("--tokens: '{p}' is not a token id")))
        .collect()
}

fn load(host: &mut dyn Host, path: &str) -> Result<(Header, Model), String> {
    let mut src = host.open(path)?;
    loader::load_model(src.as_mut(), |_, _| {}).map_err(|e| e.to_string())
}

/// Runs one command. Errors are one human-readable line.
pub fn run(args: &[String], host: &mut dyn Host) -> Result<(), String> {
    let a = Args::parse(args)?;
    match a.cmd.as_str() {
        "info" => info(&a, host),
        "logits" => logits(&a, host),
        "generate" => generate(&a, host),
        "tokenize" => tokenize(&a, host),
        "decide" => decide(&a, host),
        "bench-decide" => bench_decide(&a, host),
        "bench-kernels" => bench(&a, host),
        "bench-grammar" => bench_grammar(&a, host),
        "self-test" => self_test(&a, host),
        "help" | "--help" | "-h" => {
            host.out(USAGE);
            host.out("\n");
            Ok(())
        }
        other => Err(format!("unknown command '{other}'\n{USAGE}")),
    }
}

/// `self-test`: [`crate::quant::selftest`] as JSON; an error (exit 1) if any type fails.
fn self_test(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    a.check_known(&["rows"])?;
    let rows: usize = a.num("rows", 200)?;
    let (report, ok) = self_test_json(rows);
    host.out(&report);
    host.out("\n");
    if ok {
        Ok(())
    } else {
        Err("self-test: a fast kernel differs from its scalar reference (see the JSON above)".into())
    }
}

/// The self-test report `{"simd": …, "dot_add": …, "ok": …, "kernels": [{type, rows, max_dot_err, decode_mismatches, ok}]}`
/// (`dot_add`: whether this engine runs the int8 GEMM's dot-add form, checked in the kernels)
/// and whether every type passed (shared with `kernelSelfTest` in wasm.rs).
pub fn self_test_json(rows: usize) -> (String, bool) {
    let checks = crate::quant::selftest::check_kernels(rows, 0x9e37_79b9_7f4a_7c15);
    let ok = checks.iter().all(|c| c.ok());
    let items = checks.iter().map(|c| {
        json::object([
            ("type", json::string(c.ty.name())),
            ("rows", c.rows.to_string()),
            ("max_dot_err", format!("{:e}", c.max_dot_err)),
            ("decode_mismatches", c.decode_mismatches.to_string()),
            ("ok", c.ok().to_string()),
        ])
    });
    let report = json::object([
        ("simd", json::string(crate::quant::SIMD_LEVEL)),
        ("dot_add", crate::quant::gemm8::quad_add_exact().to_string()),
        ("ok", ok.to_string()),
        ("kernels", json::array(items)),
    ]);
    (report, ok)
}

fn info(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    a.check_known(&["model"])?;
    let path = a.req("model")?;
    let h = {
        let mut src = host.open(path)?;
        loader::read_header(src.as_mut()).map_err(|e| e.to_string())?
    };
    let cfg = crate::model::Config::from_header(&h).map_err(|e| e.to_string())?;
    let mut by_type: BTreeMap<GgmlType, (u64, u64)> = BTreeMap::new();
    for t in &h.tensors {
        let e = by_type.entry(t.ty).or_default();
        e.0 += 1;
        e.1 += t.size;
    }
    let (rec, kv) = cfg.state_bytes();
    let n = |v: usize| v.to_string();
    let hp = json::object([
        ("n_vocab", n(cfg.n_vocab)),
        ("n_embd", n(cfg.n_embd)),
        ("n_layer", n(cfg.n_layer)),
        ("n_ff", n(cfg.n_ff)),
        ("n_head", n(cfg.n_head)),
        ("n_head_kv", n(cfg.n_head_kv)),
        ("head_dim", n(cfg.head_dim)),
        ("n_rot", n(cfg.n_rot)),
        ("rope_freq_base", json::f32(cfg.rope_base)),
        ("rms_norm_eps", json::f32(cfg.eps)),
        ("ssm_conv_kernel", n(cfg.conv_kernel)),
        ("ssm_state_size", n(cfg.d_state)),
        ("ssm_group_count", n(cfg.n_k_heads)),
        ("ssm_time_step_rank", n(cfg.n_v_heads)),
        ("context_length", n(cfg.context_length)),
        ("recurrent_layers", json::array(cfg.recurrent.iter().map(|r| r.to_string()))),
        ("tied_output", cfg.tied_output.to_string()),
    ]);
    let types = json::object(by_type.iter().map(|(t, (count, bytes))| {
        (t.name(), json::object([("tensors", count.to_string()), ("bytes", bytes.to_string())]))
    }));
    let out = json::object([
        ("architecture", json::string(&cfg.arch)),
        ("gguf_version", h.version.to_string()),
        ("file_size", h.file_size().to_string()),
        ("tensor_count", h.tensors.len().to_string()),
        ("hyperparameters", hp),
        ("types", types),
        ("state_bytes_per_sequence", rec.to_string()),
        ("kv_bytes_per_token", kv.to_string()),
    ]);
    host.out(&out);
    host.out("\n");
    Ok(())
}

/// `--layout auto` (the default: interleaved rows and expanded IQ2_S / IQ2_XS where this build has
/// the faster kernels, as the runtime loads them) or `plain` (the file's layout, for comparisons).
fn layout(a: &Args) -> Result<(), String> {
    let faster = match a.get("layout") {
        None | Some("auto") => true,
        Some("plain") => false,
        Some(other) => return Err(format!("--layout must be auto or plain, not {other}")),
    };
    crate::quant::r4::set_enabled(faster);
    crate::quant::kquants::forms::set_enabled(faster);
    Ok(())
}

fn logits(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    a.check_known(&["model", "tokens", "all", "precision", "layout"])?;
    layout(a)?;
    let ids = parse_ids(a.req("tokens")?)?;
    if ids.is_empty() {
        return Err("--tokens is empty".into());
    }
    let prec = a.precision()?;
    let (_, model) = load(host, a.req("model")?)?;
    let mut st = model.new_state(ids.len());
    let want = if a.flag("all") { Logits::All } else { Logits::Last };
    let l = model.forward(&mut st, &ids, want, prec, &mut Scratch::default()).map_err(|e| e.to_string())?;
    let rows = l.chunks(model.config.n_vocab).map(|r| json::array(r.iter().map(|&v| json::f32(v))));
    host.out(&json::object([("logits", json::array(rows))]));
    host.out("\n");
    Ok(())
}

fn tokenize(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    a.check_known(&["model", "text", "special"])?;
    let h = {
        let mut src = host.open(a.req("model")?)?;
        loader::read_header(src.as_mut()).map_err(|e| e.to_string())?
    };
    let tok = Tokenizer::from_gguf(&h).map_err(|e| e.to_string())?;
    let ids = tok.encode(a.req("text")?, a.flag("special"));
    host.out(&json::object([("ids", json::array(ids.iter().map(|i| i.to_string())))]));
    host.out("\n");
    Ok(())
}

/// Times constrained decoding over a model's vocabulary: building the token trie, compiling the
/// schema, and each step's mask, on random walks (tokens drawn uniformly among those allowed).
fn bench_grammar(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    use crate::grammar::{random_walk, GrammarVocab, OutputSpec};
    a.check_known(&["vocab", "schema", "tools", "json-object", "tokens", "walks", "seed"])?;
    let h = {
        let mut src = host.open(a.req("vocab")?)?;
        loader::read_header(src.as_mut()).map_err(|e| e.to_string())?
    };
    let tok = Tokenizer::from_gguf(&h).map_err(|e| e.to_string())?;
    let spec = match (a.get("schema"), a.get("tools")) {
        (Some(p), None) => format!(r#"{{"type":"json_schema","schema":{}}}"#, read_text(host, p)?),
        (None, Some(p)) => format!(r#"{{"type":"tool_calls","tools":{}}}"#, read_text(host, p)?),
        (None, None) if a.flag("json-object") => r#"{"type":"json_object"}"#.to_string(),
        _ => return Err("bench-grammar needs one of --schema, --tools or --json-object".into()),
    };
    let spec = OutputSpec::from_json(&spec).map_err(|e| format!("{}: {e}", e.code()))?;
    let num = |k: &str, d: usize| a.get(k).map(|v| v.parse::<usize>().map_err(|_| format!("--{k} must be a number"))).unwrap_or(Ok(d));
    let (max_tokens, walks, seed) = (num("tokens", 400)?, num("walks", 5)?, num("seed", 1)? as u64);
    let t0 = crate::bench::now_ms();
    let vocab = GrammarVocab::new(&tok).map_err(|e| format!("{}: {e}", e.code()))?;
    let vocab_ms = crate::bench::now_ms() - t0;
    let (mut compile_ms, mut ms, mut ended, mut sample) = (0.0, Vec::new(), 0, String::new());
    for w in 0..walks {
        let t0 = crate::bench::now_ms();
        let mut c = vocab.compile(&spec).map_err(|e| format!("{}: {e}", e.code()))?;
        compile_ms += crate::bench::now_ms() - t0;
        let walk = random_walk(&mut c, tok.n_vocab(), max_tokens, seed + w as u64).map_err(|e| format!("{}: {e}", e.code()))?;
        ended += walk.ended as usize;
        ms.extend(walk.mask_ms);
        if w == 0 {
            sample = tok.decode(&walk.tokens, true);
        }
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms.get(((ms.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0.0);
    let f = |x: f64| format!("{x:.4}");
    host.out(&json::object([
        ("n_vocab", tok.n_vocab().to_string()),
        ("vocab_ms", f(vocab_ms)),
        ("compile_ms_mean", f(compile_ms / walks.max(1) as f64)),
        ("steps", ms.len().to_string()),
        ("mask_ms_mean", f(ms.iter().sum::<f64>() / ms.len().max(1) as f64)),
        ("mask_ms_p50", f(pct(0.5))),
        ("mask_ms_p99", f(pct(0.99))),
        ("mask_ms_max", f(pct(1.0))),
        ("walks_ended", ended.to_string()),
        ("walks", walks.to_string()),
        ("sample", json::string(&sample)),
    ]));
    host.out("\n");
    Ok(())
}

/// Reads a whole (small) file through the host.
fn read_text(host: &mut dyn Host, path: &str) -> Result<String, String> {
    let mut src = host.open(path)?;
    let size = src.size()?;
    if size > 64 << 20 {
        return Err(format!("{path}: {size} bytes is too large for a request"));
    }
    let mut buf = vec![0u8; size as usize];
    src.read_at(0, &mut buf)?;
    String::from_utf8(buf).map_err(|_| format!("{path} is not UTF-8 text"))
}

/// The last path component (the model name a response reports, as llama.cpp's oracle does).
fn file_name(path: &str) -> &str {
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// `decide`: a SystemOne request through the joint schema head — in the GGUF (`clef`), or
/// `--head joint_head.safetensors` (+ `joint_head_config.json` beside it) with a head-less one;
/// a head-less file without `--head` answers by the approximate label readout, and says so on
/// standard error (the response carries `"approximate":true`).
/// Errors are `code: message` (see [`crate::clef::DecisionError::code`]).
fn decide(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    use crate::clef::{Decider, DecisionModel, Decisions};
    a.check_known(&["model", "head", "head-config", "request", "precision"])?;
    let prec = a.precision()?;
    let model_path = a.req("model")?;
    let body = read_text(host, a.req("request")?)?;
    let (h, model) = load(host, model_path)?;
    let tok = Tokenizer::from_gguf(&h).map_err(|e| format!("cannot tokenize: {e}"))?;
    let typed = |e: crate::clef::DecisionError| format!("{}: {e}", e.code());
    let dm = match a.get("head") {
        None => Decisions::from_gguf(&h, &model, &tok, file_name(model_path)).map_err(typed)?,
        Some(head) => {
            let cfg_path = match a.get("head-config") {
                Some(p) => p.to_string(),
                None => format!("{}joint_head_config.json", &head[..head.len() - file_name(head).len()]),
            };
            let cfg = read_text(host, &cfg_path)?;
            let mut src = host.open(head)?;
            Decisions::Head(Box::new(
                DecisionModel::from_safetensors(&h, &model, src.as_mut(), &cfg, file_name(model_path)).map_err(typed)?,
            ))
        }
    };
    if dm.is_approximate() {
        host.note("approximate: this model has no decision head (give --head joint_head.safetensors); answering by label-token readout\n");
    }
    // The engine's context: the prompt's length (known before any backbone work).
    let req = crate::clef::parse_request(&body).map_err(typed)?;
    let mut d = Decider::new();
    let n = d.context_needed(&tok, &dm, &req).map_err(typed)?;
    let n_ctx = crate::clef::decide::context_for(&model, n);
    let mut engine = Engine::new(model, Some(tok), n_ctx).map_err(|e| format!("out_of_memory: {e}"))?;
    engine.precision = prec;
    let (req, resp) = d.decide(&mut engine, &dm, &body).map_err(typed)?;
    host.out(&resp.to_json(&req));
    host.out("\n");
    Ok(())
}

/// `bench-decide`: what the joint schema head adds to a prompt. A request of about `--tokens`
/// prompt tokens (three questions; the state is filler text sized to reach the count) is run
/// `--runs` times three ways on one engine, each from an empty state (no prefix reuse):
/// `prompt` — the tokens as a chat prompt (prefill, logits of the last token: a generation's
/// prompt time); `hidden` — the same prefill returning the final-norm hidden rows (what the head
/// reads); `decide` — the whole decision (parse, render, prefill, head streaming and scoring,
/// answers). The fastest of the runs in ms (the least disturbed by other work on the machine),
/// and the head's share: (decide − hidden) / decide. The head alone on
/// the hidden run's rows too: `push_ms` (LayerNorm + memory rows, as the chunks arrive) and
/// `scores_ms` (routing and joint blocks, scorer).
fn bench_decide(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    use crate::bench::now_ms;
    use crate::clef::{decide::context_for, Decider, DecisionModel};
    a.check_known(&["model", "head", "head-config", "tokens", "runs", "precision"])?;
    let want: usize = a.num("tokens", 300)?;
    let runs: usize = a.num("runs", 3)?.max(1);
    let model_path = a.req("model")?;
    let head = a.req("head")?;
    let t_load = now_ms();
    let (h, model) = load(host, model_path)?;
    let tok = Tokenizer::from_gguf(&h).map_err(|e| format!("cannot tokenize: {e}"))?;
    let typed = |e: crate::clef::DecisionError| format!("{}: {e}", e.code());
    let cfg_path = a
        .get("head-config")
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}joint_head_config.json", &head[..head.len() - file_name(head).len()]));
    let cfg = read_text(host, &cfg_path)?;
    let mut src = host.open(head)?;
    let dm = DecisionModel::from_safetensors(&h, &model, src.as_mut(), &cfg, file_name(model_path)).map_err(typed)?;
    let load_ms = now_ms() - t_load;
    // The request: filler state words until the prompt has `want` tokens.
    let body = |words: usize| {
        let state: Vec<String> = (0..words).map(|i| ["order", "late", "refund", "customer", "charged", "twice"][i % 6].to_string()).collect();
        format!(
            r#"{{"state":"{}","questions":{{"route":{{"type":"choice","instructions":"Which team should handle this?","criteria":{{"billing":null,"shipping":null,"technical":null}}}},"angry":{{"type":"noul","instructions":"Is the customer angry?"}},"urgency":{{"type":"score","instructions":"How urgent is it?","criteria":["can wait","this week","today","right now"]}}}}}}"#,
            state.join(" ")
        )
    };
    let d = Decider::new();
    let n_tokens = |words: usize| -> Result<usize, String> {
        let req = crate::clef::parse_request(&body(words)).map_err(typed)?;
        Ok(d.prompt(&tok, &dm, &req).map_err(typed)?.tokens.len())
    };
    let mut words = 0;
    while n_tokens(words)? < want {
        words += (want - n_tokens(words)?).div_ceil(2).max(1);
    }
    let body = body(words);
    let req = crate::clef::parse_request(&body).map_err(typed)?;
    let prompt_of = d.prompt(&tok, &dm, &req).map_err(typed)?;
    let (tokens, tags) = (prompt_of.tokens, prompt_of.tags);
    let n_ctx = context_for(&model, tokens.len());
    let mut engine = Engine::new(model, Some(tok), n_ctx).map_err(|e| format!("out_of_memory: {e}"))?;
    engine.precision = a.precision()?;
    let chunk = crate::clef::decide::DEFAULT_CHUNK;
    let fastest = |v: Vec<f64>| v.into_iter().fold(f64::INFINITY, f64::min);
    let (mut prompt, mut hidden, mut decide) = (Vec::new(), Vec::new(), Vec::new());
    let (mut push, mut scores) = (Vec::new(), Vec::new());
    let mut mm = crate::ops::MatmulScratch::default();
    for _ in 0..runs {
        engine.reset();
        let t = now_ms();
        engine.begin(&tokens, GenParams { max_tokens: 1, ..Default::default() }).map_err(|e| e.to_string())?;
        while engine.prefill(chunk).map_err(|e| e.to_string())? > 0 {}
        prompt.push(now_ms() - t);
        engine.end_request();
        engine.reset();
        let t = now_ms();
        engine.begin_hidden(&tokens, 0, 0).map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        let mut chunks = Vec::new();
        loop {
            let left = engine.prefill(chunk).map_err(|e| e.to_string())?;
            let r = engine.take_hidden();
            chunks.push(r.len());
            rows.extend(r);
            if left == 0 {
                break;
            }
        }
        hidden.push(now_ms() - t);
        engine.end_request();
        // The head alone on those rows, chunk by chunk as a decision feeds it.
        let t = now_ms();
        let mut input = dm.head.begin(&tags).map_err(typed)?;
        let mut at = 0;
        for n in chunks {
            dm.head.push_rows(&engine.model, &mut input, &rows[at..at + n], engine.precision, &mut mm);
            at += n;
        }
        push.push(now_ms() - t);
        let t = now_ms();
        let lm = crate::clef::lm_rows::LmRows::from_model(&engine.model, &crate::clef::Head::lexical_ids(&input, &tokens))
            .expect("a whole model holds its LM head");
        dm.head.scores(&engine.model, &input, &tokens, &lm, engine.precision, &mut mm);
        scores.push(now_ms() - t);
        engine.reset();
        let t = now_ms();
        Decider::new().decide(&mut engine, &dm, &body).map_err(typed)?;
        decide.push(now_ms() - t);
    }
    let (p, hd, dc) = (fastest(prompt), fastest(hidden), fastest(decide));
    let (ps, sc) = (fastest(push), fastest(scores));
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    host.out(&format!(
        "{{\"model\":{},\"layers\":{},\"prompt_tokens\":{},\"runs\":{runs},\"load_ms\":{:.0},\"prompt_ms\":{:.1},\"hidden_ms\":{:.1},\"decide_ms\":{:.1},\"head_ms\":{:.1},\"push_ms\":{ps:.1},\"scores_ms\":{sc:.1},\"head_share\":{},\"decide_vs_prompt\":{}}}\n",
        json::string(file_name(model_path)),
        engine.model.config.n_layer,
        tokens.len(),
        load_ms,
        p,
        hd,
        dc,
        dc - hd,
        r3((dc - hd) / dc),
        r3(dc / p - 1.0),
    ));
    Ok(())
}

/// One user turn rendered with the file's chat template (built-in ChatML if it has none).
pub fn chat_prompt(h: &Header, user: &str, no_think: bool) -> Result<String, String> {
    let t = ChatTemplate::new(h.get_str("tokenizer.chat_template")).map_err(|e| e.to_string())?;
    t.render(&ChatInput {
        messages: simple_messages(&[("user", user)]),
        add_generation_prompt: true,
        enable_thinking: Some(!no_think),
        ..Default::default()
    })
    .map_err(|e| e.to_string())
}

fn generate(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    a.check_known(&[
        "model", "tokens", "prompt", "chat", "no-think", "max-tokens", "temperature", "seed", "top-k", "top-p",
        "min-p", "repeat-penalty", "ignore-eos", "json", "ctx", "precision", "layout", "streams", "gemm-dot",
    ])?;
    let prec = a.precision()?;
    layout(a)?;
    match a.get("streams") {
        None | Some("auto") => crate::ops::set_streams(crate::ops::Streams::Auto),
        Some("on") => crate::ops::set_streams(crate::ops::Streams::Prior),
        Some("off") => crate::ops::set_streams(crate::ops::Streams::Off),
        Some(other) => return Err(format!("--streams must be auto, on or off, not {other}")),
    }
    use crate::ops::{set_gemm_dot, GemmDot};
    match a.get("gemm-dot") {
        None | Some("auto") => set_gemm_dot(GemmDot::Auto),
        Some("pairs") => set_gemm_dot(GemmDot::Pairs),
        Some("quads") => set_gemm_dot(GemmDot::Quads),
        Some(other) => return Err(format!("--gemm-dot must be auto, pairs or quads, not {other}")),
    }
    let max_tokens: usize = a.num("max-tokens", 64)?;
    let defaults = SamplerParams::default();
    let params = SamplerParams {
        temperature: a.num("temperature", 0.0)?,
        seed: a.num("seed", defaults.seed)?,
        top_k: a.num("top-k", defaults.top_k)?,
        top_p: a.num("top-p", defaults.top_p)?,
        min_p: a.num("min-p", defaults.min_p)?,
        repetition_penalty: a.num("repeat-penalty", 1.0)?,
        ..defaults
    };
    let (h, model) = load(host, a.req("model")?)?;
    let tok = Tokenizer::from_gguf(&h);
    let prompt: Vec<u32> = match (a.get("tokens"), a.get("prompt")) {
        (Some(ids), None) => parse_ids(ids)?,
        (None, Some(text)) => {
            let tok = tok.as_ref().map_err(|e| format!("cannot tokenize the prompt: {e}"))?;
            if a.flag("chat") {
                tok.encode(&chat_prompt(&h, text, a.flag("no-think"))?, true)
            } else {
                tok.encode(text, false)
            }
        }
        _ => return Err("generate needs exactly one of --tokens or --prompt".into()),
    };
    if prompt.is_empty() {
        return Err("the prompt is empty".into());
    }
    let n_ctx: usize = a.num("ctx", prompt.len() + max_tokens + 1)?;
    let mut engine = Engine::new(model, tok.ok(), n_ctx).map_err(|e| e.to_string())?;
    engine.precision = prec;
    let gp = GenParams { sampler: params, max_tokens, stop: Vec::new(), ignore_eos: a.flag("ignore-eos"), logprobs: None };
    let json_out = a.flag("json");
    let mut text = String::new();
    let mut out_ids = Vec::new();
    let t0 = crate::bench::now_ms();
    engine.begin(&prompt, gp).map_err(|e| e.to_string())?;
    engine.prefill(usize::MAX).map_err(|e| e.to_string())?;
    let t1 = crate::bench::now_ms();
    while let Some(piece) = engine.step().map_err(|e| e.to_string())? {
        out_ids.push(piece.token);
        if json_out {
            text.push_str(&piece.text);
        } else if !piece.text.is_empty() {
            host.out(&piece.text);
        }
    }
    let t2 = crate::bench::now_ms();
    let tail = engine.flush();
    if json_out {
        text.push_str(&tail);
        // Forward passes while decoding = generated tokens − 1 (the first comes from the prompt).
        let steps = out_ids.len().saturating_sub(1).max(1) as f64;
        let timings = json::object([
            ("prompt_tokens", prompt.len().to_string()),
            ("prompt_ms", format!("{:.3}", t1 - t0)),
            ("prompt_tokens_per_s", format!("{:.2}", prompt.len() as f64 / ((t1 - t0) / 1e3).max(1e-9))),
            ("decode_ms", format!("{:.3}", t2 - t1)),
            ("decode_tokens_per_s", format!("{:.2}", steps / ((t2 - t1) / 1e3).max(1e-9))),
        ]);
        let reason = engine.finish_reason().map(|r| r.as_str()).unwrap_or("stop");
        host.out(&json::object([
            ("tokens", json::array(out_ids.iter().map(|i| i.to_string()))),
            ("text", json::string(&text)),
            ("finish_reason", json::string(reason)),
            ("timings", timings),
            ("streams", streams_report_json()),
            ("gemm_dot", gemm_dot_report_json()),
            ("r4_form", r4_form_report_json()),
        ]));
    } else {
        host.out(&tail);
    }
    host.out("\n");
    Ok(())
}

/// `bench-kernels --prefill T [--shape ROWSxCOLS]`: the prompt GEMM (4096×4096 unless `shape`
/// says otherwise, × T tokens) per quantized type.
#[allow(clippy::too_many_arguments)]
fn bench_prefill(only: Option<GgmlType>, tokens: usize, ms: f64, quads: bool, shape: (usize, usize), json_out: bool, host: &mut dyn Host) -> Result<(), String> {
    let rows = crate::bench::bench_prefill(only, tokens, ms, quads, shape);
    if json_out {
        let items = rows.iter().map(|b| {
            json::object([
                ("type", json::string(b.ty.name())),
                ("tokens", b.tokens.to_string()),
                ("gemm_gbps", format!("{:.3}", b.gemm_gbps)),
                ("gemm_gmacs", format!("{:.3}", b.gemm_gmacs)),
                ("vec_dot_gmacs", format!("{:.3}", b.vec_dot_gmacs)),
                ("r4_gemm_gmacs", b.r4.as_ref().map_or("null".into(), |v| format!("{:.3}", v.gemm))),
                ("r4_tiles_gmacs", b.r4.as_ref().map_or("null".into(), |v| format!("{:.3}", v.tiles))),
                ("r4_vec_dot_gmacs", b.r4.as_ref().map_or("null".into(), |v| format!("{:.3}", v.vec_dot4))),
            ])
        });
        host.out(&json::object([("prefill", json::array(items))]));
        host.out("\n");
    } else {
        host.out(&format!("prompt GEMM, {}×{} × {tokens} tokens (vs {tokens} vec_dot passes)\n", shape.0, shape.1));
        host.out("type      GEMM GB/s  GEMM GMAC/s  vec_dot GMAC/s  speed-up  4 rows interleaved: GEMM / vec_dot4 tiles / vec_dot4 GMAC/s\n");
        for b in rows {
            let r4 = b.r4.as_ref().map_or(String::new(), |v| format!("  {:10.2} / {:.2} / {:.2}", v.gemm, v.tiles, v.vec_dot4));
            host.out(&format!(
                "{:8} {:10.2} {:12.2} {:15.2} {:8.1}x{r4}\n",
                b.ty.name(),
                b.gemm_gbps,
                b.gemm_gmacs,
                b.vec_dot_gmacs,
                b.gemm_gmacs / b.vec_dot_gmacs
            ));
        }
    }
    Ok(())
}

/// `--shape ROWSxCOLS` of the prompt benchmark: rows a positive multiple of 4, elements per row a
/// positive multiple of 256 (a block of every type).
fn parse_shape(s: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--shape must be ROWSxCOLS (e.g. 4096x12288), not '{s}'");
    let (r, c) = s.split_once(['x', '×']).ok_or_else(bad)?;
    let (rows, cols): (usize, usize) = (r.trim().parse().map_err(|_| bad())?, c.trim().parse().map_err(|_| bad())?);
    if rows == 0 || rows % 4 != 0 || cols == 0 || cols % 256 != 0 {
        return Err(format!("--shape {s}: rows must be a positive multiple of 4 and columns of 256"));
    }
    Ok((rows, cols))
}

/// The largest type among those benchmarked (`only`, else all) whose (rows, elements per row)
/// matrix would take more than 1 GiB, with its size in GiB: a wasm32 allocation holds at most
/// 2 GiB, so each test matrix stays within 1 GiB.
fn too_big(only: Option<GgmlType>, (rows, cols): (usize, usize)) -> Option<(GgmlType, f64)> {
    let types = GgmlType::ALL.iter().copied().filter(|t| only.is_none_or(|o| o == *t));
    let big = types.max_by_key(|t| t.row_bytes(cols))?;
    let bytes = rows as f64 * big.row_bytes(cols) as f64;
    (bytes > (1u64 << 30) as f64).then(|| (big, bytes / (1u64 << 30) as f64))
}

fn bench(a: &Args, host: &mut dyn Host) -> Result<(), String> {
    a.check_known(&["json", "type", "ms", "prefill", "gemm", "rows", "dot", "shape"])?;
    let quads = match a.get("dot") {
        None | Some("pairs") => false,
        Some("quads") if crate::quant::gemm8::quad_add_exact() => true,
        Some("quads") => return Err("--dot quads: this build or engine has no exact dot-add (relaxed SIMD in Chromium has)".into()),
        Some(other) => return Err(format!("--dot must be pairs or quads, not {other}")),
    };
    use crate::quant::gemm8::{set_profile, Profile};
    match a.get("gemm") {
        None | Some("narrow") => set_profile(Profile::Narrow),
        Some("wide") => set_profile(Profile::Wide),
        Some(other) => return Err(format!("--gemm must be narrow or wide, not {other}")),
    }
    let only = match a.get("type") {
        Some(t) => Some(GgmlType::from_name(t).ok_or_else(|| format!("unknown type '{t}'"))?),
        None => None,
    };
    let ms: f64 = a.num("ms", 400.0)?;
    let matrix_rows: usize = a.num("rows", 4096)?;
    if matrix_rows == 0 || matrix_rows % 4 != 0 {
        return Err("--rows must be a positive multiple of 4".into());
    }
    if a.get("prefill").is_some() && a.get("rows").is_some() {
        return Err("--rows applies to the matvec benchmark, not --prefill".into());
    }
    if a.get("prefill").is_some() {
        let tokens: usize = a.num("prefill", 32)?;
        if tokens == 0 {
            return Err("--prefill needs at least 1 token".into());
        }
        let shape = match a.get("shape") {
            None => crate::bench::PREFILL_SHAPE,
            Some(s) => parse_shape(s)?,
        };
        if let Some((big, gib)) = too_big(only, shape) {
            return Err(format!("--shape {}x{}: a {big} matrix would take {gib:.1} GiB (at most 1 GiB); use a smaller shape or --type", shape.0, shape.1));
        }
        return bench_prefill(only, tokens, ms, quads, shape, a.flag("json"), host);
    }
    if a.get("shape").is_some() {
        return Err("--shape applies to --prefill (the matvec benchmark takes --rows)".into());
    }
    if let Some((big, gib)) = too_big(only, (matrix_rows, 4096)) {
        return Err(format!("--rows {matrix_rows}: a {big} matrix would take {gib:.1} GiB (at most 1 GiB); use fewer rows or --type"));
    }
    let rows = crate::bench::bench_all(only, matrix_rows, ms);
    if a.flag("json") {
        let items = rows.iter().map(|b| {
            json::object([
                ("type", json::string(b.ty.name())),
                ("simd_gbps", format!("{:.3}", b.simd_gbps)),
                ("scalar_gbps", format!("{:.3}", b.scalar_gbps)),
                ("r4_gbps", b.r4_gbps.map_or("null".into(), |v| format!("{v:.3}"))),
                ("streams_gbps", b.streams_gbps.map_or("null".into(), |v| format!("{v:.3}"))),
                ("expand_ns_per_block", b.expand_ns.map_or("null".into(), |v| format!("{v:.1}"))),
                ("interleave_gbps", b.interleave_gbps.map_or("null".into(), |v| format!("{v:.3}"))),
            ])
        });
        host.out(&json::object([("simd", json::string(crate::quant::SIMD_LEVEL)), ("kernels", json::array(items))]));
        host.out("\n");
    } else {
        host.out(&format!("kernels: {} (GB/s of weight bytes, one thread, {matrix_rows}×4096 matvec)\n", crate::quant::SIMD_LEVEL));
        host.out("type      simd GB/s  scalar GB/s  speed-up  4 streams GB/s         4 rows interleaved GB/s\n");
        for b in rows {
            let vs = |v: Option<f64>| v.map_or(format!("{:21}", ""), |v| format!("{v:12.2} ({:.2}x)", v / b.simd_gbps));
            let (streams, r4) = (vs(b.streams_gbps), vs(b.r4_gbps));
            host.out(&format!(
                "{:8} {:10.2} {:12.2} {:8.1}x  {streams}  {}\n",
                b.ty.name(),
                b.simd_gbps,
                b.scalar_gbps,
                b.simd_gbps / b.scalar_gbps,
                r4.trim_end()
            ));
            if let Some((one, two)) = b.r4_forms {
                host.out(&format!("{:8} four-row kernels: {one:.2} (first form), {two:.2} (second form) GB/s\n", ""));
            }
            if let (Some(ns), Some(form)) = (b.expand_ns, crate::quant::kquants::forms::form_of(b.ty)) {
                host.out(&format!("{:8} expanded after loading ({form}): {ns:.1} ns per block\n", ""));
            }
            if let Some(v) = b.interleave_gbps {
                host.out(&format!("{:8} interleaved after loading: {v:.2} GB/s\n", ""));
            }
        }
    }
    Ok(())
}

/// What this process's (instance's) kernel trials chose and measured: `{"streams": …,
/// "gemm_dot": …, "r4_form": …}`.
pub fn kernel_trials_json() -> String {
    json::object([
        ("streams", streams_report_json()),
        ("gemm_dot", gemm_dot_report_json()),
        ("r4_form", r4_form_report_json()),
    ])
}

/// What the decode kernels' form trial measured per interleaved type ([`crate::ops::r4_form_report`]).
fn r4_form_report_json() -> String {
    trial_report_json(crate::ops::r4_form_report(), ["second", "gbps_first", "gbps_second"])
}

/// What the int8 prompt GEMM's dot trial measured per type ([`crate::ops::gemm_dot_report`]):
/// `{"IQ2_S": {"quads": true, "gmacs_pairs": 52.1, "gmacs_quads": 61.0}, …}` (`quads` null while
/// undecided; empty where the engine has no exact dot-add).
fn gemm_dot_report_json() -> String {
    trial_report_json(crate::ops::gemm_dot_report(), ["quads", "gmacs_pairs", "gmacs_quads"])
}

/// What the decode matvec's streams trial measured per type ([`crate::ops::streams_report`]):
/// `{"IQ2_S": {"streams": false, "gbps_rows": 2.1, "gbps_streams": 1.8}, …}` (`streams` null
/// while undecided).
fn streams_report_json() -> String {
    trial_report_json(crate::ops::streams_report(), ["streams", "gbps_rows", "gbps_streams"])
}

/// A [`crate::tune::Trial::report`] as JSON, keys: the decision, rate A, rate B.
fn trial_report_json(report: Vec<(GgmlType, Option<bool>, f64, f64)>, keys: [&str; 3]) -> String {
    let num = |v: f64| if v.is_finite() { format!("{v:.3}") } else { "null".into() };
    let items: Vec<(String, String)> = report
        .into_iter()
        .map(|(ty, decided, a, b)| {
            let d = decided.map_or("null".to_string(), |b| b.to_string());
            (ty.to_string(), json::object([(keys[0], d), (keys[1], num(a)), (keys[2], num(b))]))
        })
        .collect();
    json::object(items.iter().map(|(k, v)| (k.as_str(), v.clone())))
}
