//! clef-web: the Clef-Flash (`qwen35`) language model from GGUF files, in Rust for WebAssembly.
//!
//! See ARCHITECTURE.md for how the pieces fit. In one line: [`gguf`] reads the container,
//! [`quant`] multiplies quantized weights, [`model`] runs the forward pass, [`tokenizer`] turns
//! text into ids and back, [`sampler`] picks the next token, [`cli`] is the command line shared
//! by the native binary and the wasm build.

pub mod gguf;
pub mod quant;
pub mod tokenizer;
pub mod bench;
pub mod model;
pub mod ops;
pub mod tune;
pub mod weights;
pub mod checksum;
pub mod split;
pub mod balance;
pub mod kv;
pub mod cluster;
pub mod warm;
pub mod shard;
pub mod cli;
pub mod json;
pub mod loader;
pub mod sampler;
pub mod grammar;
#[cfg(target_arch = "wasm32")]
pub mod wasm;
#[cfg(target_arch = "wasm32")]
mod fresh_alloc;
pub mod engine;
pub mod chat;
pub mod clef;
