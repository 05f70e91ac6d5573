//! Raw blocks and transactions as the node serves them (`getblock … 0`),
//! read in place without copying.
//!
//! Bitcoin's decoder stops at a Litecoin HogEx: since MWEB activation a
//! Litecoin block's last transaction carries tx flag 0x08 and the
//! transaction list is followed by the serialized extension block. This
//! reader knows flag 0x08, keeps every canonical output (the HogEx's
//! included) and leaves the extension block alone: MWEB-internal outputs
//! are confidential and cannot pay a watched address.

use bitcoin::block::Header;
use bitcoin::hashes::{sha256d, Hash, HashEngine};
use bitcoin::{BlockHash, Script, TxMerkleNode, Txid};

const FLAG_WITNESS: u8 = 0x01;
const FLAG_MWEB: u8 = 0x08;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    #[error("block ends early: needed {needed} more bytes at offset {offset} ({what})")]
    Truncated {
        offset: usize,
        needed: usize,
        what: &'static str,
    },
    #[error("transaction {tx} at offset {offset}: unknown tx flags 0x{flags:02x}")]
    UnknownFlags { tx: usize, offset: usize, flags: u8 },
    #[error(
        "transaction {tx} at offset {offset}: MWEB data the reader cannot skip inside a block"
    )]
    EmbeddedMweb { tx: usize, offset: usize },
    #[error(
        "{0} bytes follow the last transaction and no HogEx announces an MWEB extension block"
    )]
    TrailingBytes(usize),
    #[error("a count of {count} at offset {offset} does not fit in the {left} bytes left: cut short or corrupt")]
    ImpossibleCount {
        offset: usize,
        count: u64,
        left: usize,
    },
    #[error("the transactions do not hash to the header's merkle root (header {header}, computed {computed})")]
    MerkleMismatch {
        header: TxMerkleNode,
        computed: TxMerkleNode,
    },
    #[error("asked for block {wanted} but the bytes are block {got}")]
    WrongBlock { wanted: BlockHash, got: BlockHash },
    #[error("not hex: {0}")]
    NotHex(String),
}

/// One transaction output, borrowed from the block's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Output<'a> {
    pub index: u32,
    pub value: u64,
    pub script: &'a Script,
}

/// A transaction's place in the block's bytes: enough to hash it and to
/// read its outputs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TxSpan {
    start: usize,
    /// version || inputs || outputs, without marker and flags.
    body: (usize, usize),
    /// Where the output list starts (its count).
    outputs: usize,
    locktime: usize,
    flags: u8,
}

/// A parsed block: its header and where each transaction lies.
#[derive(Debug, Clone)]
pub struct RawBlock<'a> {
    bytes: &'a [u8],
    pub header: Header,
    txs: Vec<TxSpan>,
    /// The serialized MWEB extension block after a HogEx, if any.
    mweb_len: usize,
}

impl<'a> RawBlock<'a> {
    /// Walks every transaction. Fails on anything that is not a whole
    /// block; never stops early and calls the rest "the block".
    pub fn parse(bytes: &'a [u8]) -> Result<RawBlock<'a>, BlockError> {
        let mut r = Reader { bytes, pos: 0 };
        let header_bytes = r.take(80, "header")?;
        let header: Header = bitcoin::consensus::deserialize(header_bytes)
            .expect("80 bytes always decode as a header");
        let count = r.count(60, "transaction count")?;
        let mut txs = Vec::with_capacity(count);
        for i in 0..count {
            txs.push(read_tx(&mut r, i, InBlock::Yes)?);
        }
        let rest = bytes.len() - r.pos;
        let hogex_last = txs.last().is_some_and(|t| t.flags & FLAG_MWEB != 0);
        if rest > 0 && !hogex_last {
            return Err(BlockError::TrailingBytes(rest));
        }
        Ok(RawBlock {
            bytes,
            header,
            txs,
            mweb_len: rest,
        })
    }

    pub fn hash(&self) -> BlockHash {
        self.header.block_hash()
    }

    pub fn tx_count(&self) -> usize {
        self.txs.len()
    }

    /// Bytes of the MWEB extension block (0 before MWEB, and on Bitcoin).
    pub fn mweb_len(&self) -> usize {
        self.mweb_len
    }

    pub fn txid(&self, tx: usize) -> Txid {
        txid_of(self.bytes, &self.txs[tx])
    }

    /// Every output of transaction `tx`, in order.
    pub fn outputs(&self, tx: usize) -> impl Iterator<Item = Output<'a>> + 'a {
        let span = self.txs[tx];
        let mut r = Reader {
            bytes: self.bytes,
            pos: span.outputs,
        };
        let count = r.count(9, "outputs").expect("validated by parse");
        (0..count).map(move |i| read_output(&mut r, i).expect("validated by parse"))
    }

    /// Checks the bytes are the block `wanted` and that its transactions are
    /// the ones its header commits to, so a corrupt answer is refused whole.
    pub fn verify(&self, wanted: Option<BlockHash>) -> Result<(), BlockError> {
        let got = self.hash();
        if let Some(wanted) = wanted.filter(|w| *w != got) {
            return Err(BlockError::WrongBlock { wanted, got });
        }
        let ids = (0..self.txs.len()).map(|i| self.txid(i).to_raw_hash());
        let computed = bitcoin::merkle_tree::calculate_root(ids)
            .map(TxMerkleNode::from_raw_hash)
            .unwrap_or_else(TxMerkleNode::all_zeros);
        if computed != self.header.merkle_root {
            return Err(BlockError::MerkleMismatch {
                header: self.header.merkle_root,
                computed,
            });
        }
        Ok(())
    }
}

/// The canonical outputs of a loose transaction (`getrawtransaction`), as
/// far as they go: a mempool MWEB transaction's extension data follows its
/// outputs and is not read.
pub fn transaction_outputs(bytes: &[u8]) -> Result<Vec<Output<'_>>, BlockError> {
    let mut r = Reader { bytes, pos: 0 };
    let span = read_tx(&mut r, 0, InBlock::No)?;
    let mut r = Reader {
        bytes,
        pos: span.outputs,
    };
    let count = r.count(9, "outputs")?;
    (0..count).map(|i| read_output(&mut r, i)).collect()
}

/// The txid of a loose transaction, Litecoin MWEB ones included: the hash of
/// version, inputs, outputs and locktime, which closes every serialization
/// (after the witness and any MWEB part), so the bytes can be checked
/// against the txid they were asked for.
pub fn transaction_id(bytes: &[u8]) -> Result<Txid, BlockError> {
    let mut r = Reader { bytes, pos: 0 };
    let span = read_tx(&mut r, 0, InBlock::No)?;
    let end = span.body.1;
    let short = bytes.len() < end + 4;
    if short || (span.flags == 0 && bytes.len() != end + 4) {
        return Err(if short {
            BlockError::Truncated {
                offset: end,
                needed: end + 4 - bytes.len(),
                what: "locktime",
            }
        } else {
            BlockError::TrailingBytes(bytes.len() - end - 4)
        });
    }
    let locktime = bytes.len() - 4;
    Ok(txid_of(bytes, &TxSpan { locktime, ..span }))
}

/// Decodes the hex `getblock … 0` and `getrawtransaction` return.
pub fn from_hex(hex: &str) -> Result<Vec<u8>, BlockError> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let hex = hex.trim().as_bytes();
    if !hex.len().is_multiple_of(2) {
        return Err(BlockError::NotHex(format!(
            "odd length {} of a hex string",
            hex.len()
        )));
    }
    hex.chunks_exact(2)
        .enumerate()
        .map(|(i, pair)| match (nibble(pair[0]), nibble(pair[1])) {
            (Some(h), Some(l)) => Ok(h << 4 | l),
            _ => Err(BlockError::NotHex(format!(
                "character pair '{}' at offset {}",
                String::from_utf8_lossy(pair),
                i * 2
            ))),
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum InBlock {
    Yes,
    No,
}

fn txid_of(bytes: &[u8], t: &TxSpan) -> Txid {
    let mut engine = sha256d::Hash::engine();
    if t.flags == 0 {
        engine.input(&bytes[t.start..t.locktime + 4]);
    } else {
        engine.input(&bytes[t.start..t.start + 4]);
        engine.input(&bytes[t.body.0..t.body.1]);
        engine.input(&bytes[t.locktime..t.locktime + 4]);
    }
    Txid::from_raw_hash(sha256d::Hash::from_engine(engine))
}

fn read_tx(r: &mut Reader<'_>, tx: usize, in_block: InBlock) -> Result<TxSpan, BlockError> {
    let start = r.pos;
    r.take(4, "version")?;
    let mut flags = 0;
    let mut body_start = r.pos;
    // A zero input count followed by a non-zero byte is the segwit marker
    // and flags; a real zero-input transaction cannot be in a block.
    if r.peek(2).is_some_and(|b| b[0] == 0 && b[1] != 0) {
        flags = r.take(2, "marker and flags")?[1];
        body_start = r.pos;
        if flags & !(FLAG_WITNESS | FLAG_MWEB) != 0 {
            return Err(BlockError::UnknownFlags {
                tx,
                offset: start,
                flags,
            });
        }
    }
    let inputs = r.count(41, "inputs")?;
    for _ in 0..inputs {
        r.take(36, "outpoint")?;
        let len = r.count(1, "script length")?;
        r.take(len, "input script")?;
        r.take(4, "sequence")?;
    }
    let outputs_at = r.pos;
    let outputs = r.count(9, "outputs")?;
    for i in 0..outputs {
        read_output(r, i)?;
    }
    let body_end = r.pos;
    if in_block == InBlock::No {
        // Everything needed from a loose transaction is read.
        return Ok(TxSpan {
            start,
            body: (body_start, body_end),
            outputs: outputs_at,
            locktime: body_end,
            flags,
        });
    }
    if flags & FLAG_WITNESS != 0 {
        for _ in 0..inputs {
            let items = r.count(1, "witness items")?;
            for _ in 0..items {
                let len = r.count(1, "witness item length")?;
                r.take(len, "witness item")?;
            }
        }
    }
    if flags & FLAG_MWEB != 0 {
        // Inside a block the MWEB part lives in the extension block; the
        // HogEx carries an empty marker here.
        if r.take(1, "MWEB transaction marker")?[0] != 0 {
            return Err(BlockError::EmbeddedMweb { tx, offset: start });
        }
    }
    let locktime = r.pos;
    r.take(4, "locktime")?;
    Ok(TxSpan {
        start,
        body: (body_start, body_end),
        outputs: outputs_at,
        locktime,
        flags,
    })
}

fn read_output<'a>(r: &mut Reader<'a>, index: usize) -> Result<Output<'a>, BlockError> {
    let value = r.take(8, "output value")?;
    let value = u64::from_le_bytes(value.try_into().expect("8 bytes"));
    let len = r.count(1, "script length")?;
    let script = Script::from_bytes(r.take(len, "output script")?);
    Ok(Output {
        index: u32::try_from(index).unwrap_or(u32::MAX),
        value,
        script,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self, n: usize) -> Option<&'a [u8]> {
        self.bytes.get(self.pos..self.pos + n)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], BlockError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.bytes.len());
        match end {
            Some(end) => {
                let s = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(BlockError::Truncated {
                offset: self.pos,
                needed: n - (self.bytes.len() - self.pos.min(self.bytes.len())),
                what,
            }),
        }
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, BlockError> {
        let first = self.take(1, what)?[0];
        Ok(match first {
            0xfd => u64::from(u16::from_le_bytes(
                self.take(2, what)?.try_into().expect("2"),
            )),
            0xfe => u64::from(u32::from_le_bytes(
                self.take(4, what)?.try_into().expect("4"),
            )),
            0xff => u64::from_le_bytes(self.take(8, what)?.try_into().expect("8")),
            n => u64::from(n),
        })
    }

    /// A count of items of at least `min_size` bytes each, refused when the
    /// bytes left could not hold them (so garbage cannot ask for gigabytes).
    fn count(&mut self, min_size: usize, what: &'static str) -> Result<usize, BlockError> {
        let offset = self.pos;
        let count = self.varint(what)?;
        let left = self.bytes.len() - self.pos;
        match usize::try_from(count) {
            Ok(n) if n.saturating_mul(min_size) <= left => Ok(n),
            _ => Err(BlockError::ImpossibleCount {
                offset,
                count,
                left,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GENESIS: &str = include_str!("../tests/fixtures/genesis_block.hex");

    #[test]
    fn the_genesis_block_parses_and_verifies() {
        let bytes = from_hex(GENESIS).unwrap();
        let block = RawBlock::parse(&bytes).unwrap();
        assert_eq!(
            block.hash().to_string(),
            "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
        );
        assert_eq!(block.tx_count(), 1);
        assert_eq!(
            block.txid(0).to_string(),
            "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
        );
        block.verify(None).unwrap();
        let out: Vec<_> = block.outputs(0).collect();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, 50 * 100_000_000);
    }

    #[test]
    fn a_cut_block_is_refused_with_where_it_ends() {
        let bytes = from_hex(GENESIS).unwrap();
        let err = RawBlock::parse(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(
            matches!(
                err,
                BlockError::Truncated {
                    what: "locktime",
                    ..
                }
            ),
            "{err}"
        );
        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(
            RawBlock::parse(&extra).unwrap_err(),
            BlockError::TrailingBytes(1)
        );
    }

    #[test]
    fn a_flipped_byte_fails_the_merkle_check() {
        let mut bytes = from_hex(GENESIS).unwrap();
        let n = bytes.len();
        bytes[n - 10] ^= 1;
        let block = RawBlock::parse(&bytes).unwrap();
        assert!(matches!(
            block.verify(None),
            Err(BlockError::MerkleMismatch { .. })
        ));
    }

    #[test]
    fn a_loose_transaction_hashes_to_its_txid() {
        let bytes = from_hex(GENESIS).unwrap();
        let coinbase = &bytes[81..];
        assert_eq!(
            transaction_id(coinbase).unwrap().to_string(),
            "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"
        );
        let mut longer = coinbase.to_vec();
        longer.push(0);
        assert_eq!(
            transaction_id(&longer).unwrap_err(),
            BlockError::TrailingBytes(1)
        );
    }

    #[test]
    fn hex_errors_name_the_offset() {
        assert!(from_hex("0g").unwrap_err().to_string().contains("offset 0"));
        assert!(from_hex("abc")
            .unwrap_err()
            .to_string()
            .contains("odd length"));
    }
}
