//! wasm-bindgen surface. For now: the command line under Node (`www/cli.mjs`), which runs the
//! same `cli::run` as the native binary on the SIMD128 kernels. The browser engine API builds on
//! the same loader and model.

use crate::cli::{self, Host};
use crate::loader::ByteSource;
use wasm_bindgen::prelude::*;

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

#[wasm_bindgen]
extern "C" {
    /// The JS side of the command line (see www/cli.mjs): file access and stdout.
    #[derive(Clone)]
    pub type CliHost;
    #[wasm_bindgen(method, catch)]
    fn size(this: &CliHost, path: &str) -> Result<f64, JsValue>;
    /// Reads `buf.length` bytes at `offset` of `path` straight into `buf` (a view of wasm memory).
    #[wasm_bindgen(method, catch, js_name = readAt)]
    fn read_at(this: &CliHost, path: &str, offset: f64, buf: &mut [u8]) -> Result<(), JsValue>;
    #[wasm_bindgen(method)]
    fn write(this: &CliHost, s: &str);
}

fn js_err(e: JsValue) -> String {
    e.as_string()
        .or_else(|| js_sys::Reflect::get(&e, &"message".into()).ok().and_then(|m| m.as_string()))
        .unwrap_or_else(|| format!("{e:?}"))
}

struct JsFile {
    host: CliHost,
    path: String,
}

impl ByteSource for JsFile {
    fn size(&mut self) -> Result<u64, String> {
        self.host.size(&self.path).map(|s| s as u64).map_err(js_err)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), String> {
        self.host.read_at(&self.path, offset as f64, buf).map_err(js_err)
    }
}

struct JsHost(CliHost);

impl Host for JsHost {
    fn open(&mut self, path: &str) -> Result<Box<dyn ByteSource>, String> {
        let mut f = JsFile { host: self.0.clone(), path: path.to_string() };
        f.size()?; // fail early with the OS message
        Ok(Box::new(f))
    }
    fn out(&mut self, s: &str) {
        self.0.write(s);
    }
}

/// Runs one `clef` command; throws a one-line message on error.
#[wasm_bindgen(js_name = runCli)]
pub fn run_cli(args: Vec<String>, host: CliHost) -> Result<(), JsValue> {
    cli::run(&args, &mut JsHost(host)).map_err(|e| JsValue::from_str(&e))
}
