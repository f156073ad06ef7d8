//! Native command line: `cargo run --release --bin clef -- <command> …` (see `clef_web::cli`).

#[cfg(target_arch = "wasm32")]
fn main() {} // the wasm command line is www/cli.mjs (it calls `runCli` in the library)

#[cfg(not(target_arch = "wasm32"))]
use clef_web::cli::{self, Host};
#[cfg(not(target_arch = "wasm32"))]
use clef_web::loader::{ByteSource, FileSource};
#[cfg(not(target_arch = "wasm32"))]
use std::io::Write;

#[cfg(not(target_arch = "wasm32"))]
struct NativeHost;

#[cfg(not(target_arch = "wasm32"))]
impl Host for NativeHost {
    fn open(&mut self, path: &str) -> Result<Box<dyn ByteSource>, String> {
        let f = std::fs::File::open(path).map_err(|e| format!("cannot open {path}: {e}"))?;
        Ok(Box::new(FileSource(f)))
    }
    fn out(&mut self, s: &str) {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(s.as_bytes());
        let _ = o.flush();
    }
    fn note(&mut self, s: &str) {
        eprint!("{s}");
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = cli::run(&args, &mut NativeHost) {
        let first = e.lines().next().unwrap_or("error");
        eprintln!("error: {first}");
        std::process::exit(1);
    }
}
