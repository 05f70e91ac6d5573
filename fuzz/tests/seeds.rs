//! Every seed and every input the fuzzer once crashed or hung on, through
//! its target without AFL: a crash found once stays found in the test
//! command. The seeds must also reach what the fuzzer is meant to explore:
//! `bad_*` seeds are refused on purpose, every other one is accepted, and
//! those of real payments (`mainnet_*`) and made-up ones (`made_*`) pay a
//! watched address.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use paywatch_fuzz::{utxo_block, Target, TARGETS};

/// Far above what any of these inputs takes, even unoptimised: past it, the
/// input is a hang.
const SLOW: Duration = Duration::from_secs(20);

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable folder").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn run(target: Target, file: &Path) -> Option<usize> {
    let data = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let start = Instant::now();
    let accepted = target(&data);
    let took = start.elapsed();
    assert!(took < SLOW, "{}: took {took:?}", file.display());
    accepted
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_seed_runs_and_the_real_ones_are_accepted() {
    for (name, target) in TARGETS {
        let seeds = files(&root().join("seeds").join(name));
        assert!(seeds.len() >= 3, "{name}: only {} seeds", seeds.len());
        for seed in seeds {
            let file = seed.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let found = run(target, &seed);
            if file.starts_with("bad_") {
                assert_eq!(found, None, "{}: accepted", seed.display());
            } else if file.starts_with("mainnet_") || file.starts_with("made_") {
                assert!(
                    found.is_some_and(|n| n > 0),
                    "{}: {found:?} payments",
                    seed.display()
                );
            } else {
                assert!(found.is_some(), "{}: refused", seed.display());
            }
        }
    }
}

#[test]
fn every_input_the_fuzzer_crashed_on_is_refused_or_read_without_a_crash() {
    for (name, target) in TARGETS {
        for input in files(&root().join("regressions").join(name)) {
            run(target, &input);
        }
    }
}

/// Bitcoin block 702861 (1.4 MB) is past AFL's input limit, so it is no
/// seed; it goes through the same target here.
#[test]
fn the_large_mainnet_bitcoin_block_is_accepted() {
    let block = root().join(
        "../chains/utxo/tests/fixtures/mainnet_block_000000000000000000000c835b2adcaedc20fdf6ee440009c249452c726dafae.raw",
    );
    assert!(run(utxo_block, &block).is_some_and(|n| n > 0));
}
