//! The fuzz targets: one function per network format, each taking the bytes
//! a node would send and driving them through the chain crate's own decoding
//! and translation. The AFL binaries (`src/bin`) and the seed and regression
//! tests (`tests/seeds.rs`) call the same functions, so an input that once
//! crashed runs in the normal test command without AFL.
//!
//! A target gives the number of payments to watched addresses the chain
//! crate found, or `None` when it refused the input; the seed tests check
//! it, AFL does not: refusing an input with an error is as good an end as
//! accepting it. Only a panic, a hang or an allocation past AFL's memory
//! limit fails.

mod evm;
mod solana;
mod tron;
mod utxo;

pub use evm::evm_answers;
pub use solana::solana_block;
pub use tron::tron_block;
pub use utxo::utxo_block;

/// A target: the payments found in an input, `None` when it was refused.
pub type Target = fn(&[u8]) -> Option<usize>;

/// Every target by the name of its binary and its folders under `seeds/`
/// and `regressions/`.
pub const TARGETS: [(&str, Target); 4] = [
    ("utxo_block", utxo_block),
    ("evm_answers", evm_answers),
    ("tron_block", tron_block),
    ("solana_block", solana_block),
];
