use std::fmt;

use crate::{Amount, Asset, Network};

/// A block's place in its chain. For Solana the height is the slot and the
/// parent is the previous blockhash; for Tron it is the number and block id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlockRef {
    pub height: u64,
    pub hash: String,
    pub parent: String,
}

impl fmt::Display for BlockRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.hash, self.height)
    }
}

/// What arrived: a payment method's asset, or a token paywatch does not
/// accept (recorded all the same, and flagged `wrong_asset`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AssetId {
    Known(Asset),
    /// A token contract that is none of the configured ones.
    Token {
        contract: String,
    },
}

impl AssetId {
    /// The stored spelling: `USDT`, or `token:<contract>`.
    pub fn code(&self) -> String {
        match self {
            AssetId::Known(a) => a.as_str().to_owned(),
            AssetId::Token { contract } => format!("token:{contract}"),
        }
    }

    pub fn from_code(code: &str) -> AssetId {
        match code.strip_prefix("token:") {
            Some(contract) => AssetId::Token {
                contract: contract.to_owned(),
            },
            None => match code.parse::<Asset>() {
                Ok(a) => AssetId::Known(a),
                Err(_) => AssetId::Token {
                    contract: code.to_owned(),
                },
            },
        }
    }
}

/// One value movement to a watched address, as the chain saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Transfer {
    pub network: Network,
    pub asset: AssetId,
    pub txid: String,
    /// Output index (UTXO), log index (EVM/Tron) or account index (Solana):
    /// with the txid it names the transfer uniquely within its block.
    pub index: u32,
    pub to: String,
    pub from: Option<String>,
    pub amount: Amount,
    /// A failed transaction moves nothing; it is kept for the record only.
    pub success: bool,
    /// The final height from which the transfer counts final, when that is
    /// later than its block's: a coinbase output cannot be spent for 100
    /// blocks, and an orphaned coinbase never comes back, so it is final
    /// only at 100 confirmations (or the network's, if more). `None`: final
    /// with its block.
    pub matures_at: Option<u64>,
}

impl Transfer {
    /// The final height at which this transfer counts final.
    pub fn final_from(&self, block_height: u64) -> u64 {
        self.matures_at
            .map_or(block_height, |m| m.max(block_height))
    }
}

/// A block as a source returns it: its place, its time and what it paid to
/// watched addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceBlock {
    pub block: BlockRef,
    /// Block time, unix seconds.
    pub timestamp: i64,
    pub transfers: Vec<Transfer>,
}

/// What the canonical stream emits, in the order ingest must apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChainEvent {
    Connected {
        block: BlockRef,
        timestamp: i64,
        transfers: Vec<Transfer>,
    },
    Disconnected {
        block: BlockRef,
    },
}

impl ChainEvent {
    pub fn block(&self) -> &BlockRef {
        match self {
            ChainEvent::Connected { block, .. } | ChainEvent::Disconnected { block } => block,
        }
    }
}

impl From<SourceBlock> for ChainEvent {
    fn from(b: SourceBlock) -> Self {
        ChainEvent::Connected {
            block: b.block,
            timestamp: b.timestamp,
            transfers: b.transfers,
        }
    }
}
