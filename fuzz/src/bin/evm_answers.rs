//! The `evm_answers` fuzz target (see the crate's docs). Under `cargo afl build`
//! it runs in AFL's persistent loop; built plainly it runs once over standard
//! input, to replay a crash: `cargo run -p paywatch-fuzz --bin evm_answers < FILE`.

#[cfg(fuzzing)]
fn main() {
    afl::fuzz!(|data: &[u8]| {
        paywatch_fuzz::evm_answers(data);
    });
}

#[cfg(not(fuzzing))]
fn main() -> std::io::Result<()> {
    use std::io::Read;
    let mut data = Vec::new();
    std::io::stdin().read_to_end(&mut data)?;
    paywatch_fuzz::evm_answers(&data);
    Ok(())
}
