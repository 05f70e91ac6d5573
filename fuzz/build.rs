//! `cargo afl build` passes `--cfg fuzzing`: declared, so the unexpected-cfg
//! lint knows it.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(fuzzing)");
}
