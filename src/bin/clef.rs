//! Native command line: `cargo run --release --bin clef -- <command> …` (see `clef_web::cli`).

use clef_web::cli::{self, Host};
use clef_web::loader::{ByteSource, FileSource};
use std::io::Write;

struct NativeHost;

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
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = cli::run(&args, &mut NativeHost) {
        let first = e.lines().next().unwrap_or("error");
        eprintln!("error: {first}");
        std::process::exit(1);
    }
}
