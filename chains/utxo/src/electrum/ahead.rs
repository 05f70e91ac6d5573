//! Headers read ahead of the stream while it catches up.
//!
//! A server that holds back small answers (ElectrumX 2 pads and delays them
//! up to a second) makes every request cost a second, and most blocks hold
//! nothing for the watched addresses: all they need is their header. So the
//! first block asked for brings the headers above it, up to the snapshot's
//! tip, in the same request, and the blocks after it with no history entries
//! are answered from them without asking.
//!
//! The headers say what the server's chain was when they were read, so they
//! are kept only while that still holds as far as the source can tell:
//! - they chain (each names the one before it as its parent), and were read
//!   in one batch with the snapshot's tip, which the last of them is when
//!   they reach it;
//! - they are dropped as soon as the source reads another tip (a new
//!   snapshot), even one that merely extends the chain: telling an extension
//!   from a switch of branch would cost a request too, and refilling costs
//!   one;
//! - they are dropped when a height at or below the last block handed out is
//!   asked (the stream walking back after a parent mismatch: it must see the
//!   server's chain now), when the one for the next height does not name the
//!   block handed out below it as its parent, and on any error.

use bitcoin::block::Header;
use bitcoin::BlockHash;

/// The most headers one `blockchain.block.headers` request brings back: the
/// limit of ElectrumX, Fulcrum and electrs alike (one retarget period).
pub(super) const READ_AHEAD: u64 = 2016;

/// Headers of consecutive heights, read in one batch with the snapshot's tip.
#[derive(Debug)]
pub(super) struct Ahead {
    /// The snapshot's tip they were read with: they hold only while it does.
    pub(super) tip: BlockHash,
    first: u64,
    headers: Vec<Header>,
}

impl Ahead {
    /// `headers` from height `first` up; `None` unless each one names the
    /// one before it as its parent.
    pub(super) fn new(tip: BlockHash, first: u64, headers: Vec<Header>) -> Option<Ahead> {
        chains(&headers).then_some(Ahead {
            tip,
            first,
            headers,
        })
    }

    pub(super) fn get(&self, height: u64) -> Option<&Header> {
        let i = usize::try_from(height.checked_sub(self.first)?).ok()?;
        self.headers.get(i)
    }
}

/// Whether each header names the one before it as its parent.
pub(super) fn chains(headers: &[Header]) -> bool {
    headers
        .windows(2)
        .all(|w| w[1].prev_blockhash == w[0].block_hash())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::block::Version;
    use bitcoin::hashes::Hash as _;
    use bitcoin::{CompactTarget, TxMerkleNode};

    fn child_of(parent: BlockHash, time: u32) -> Header {
        Header {
            version: Version::TWO,
            prev_blockhash: parent,
            merkle_root: TxMerkleNode::all_zeros(),
            time,
            bits: CompactTarget::from_consensus(0x207f_ffff),
            nonce: 0,
        }
    }

    fn chain_from(parent: BlockHash, n: u32) -> Vec<Header> {
        let mut out: Vec<Header> = Vec::new();
        for time in 0..n {
            let parent = out.last().map_or(parent, Header::block_hash);
            out.push(child_of(parent, time));
        }
        out
    }

    #[test]
    fn answers_only_the_heights_it_holds() {
        let headers = chain_from(BlockHash::all_zeros(), 3);
        let tip = headers[2].block_hash();
        let ahead = Ahead::new(tip, 10, headers.clone()).unwrap();
        assert!(ahead.get(9).is_none());
        assert_eq!(ahead.get(10), Some(&headers[0]));
        assert_eq!(ahead.get(12), Some(&headers[2]));
        assert!(ahead.get(13).is_none());
        assert!(ahead.get(u64::MAX).is_none());
    }

    #[test]
    fn headers_that_do_not_chain_are_refused() {
        let mut headers = chain_from(BlockHash::all_zeros(), 4);
        assert!(chains(&headers) && chains(&headers[..1]) && chains(&[]));
        // Another block at the third height: its child no longer follows.
        headers[2] = child_of(headers[1].block_hash(), 99);
        assert!(!chains(&headers));
        assert!(Ahead::new(BlockHash::all_zeros(), 0, headers).is_none());
    }
}
