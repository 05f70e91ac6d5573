//! The server's chain: its tip and the headers below it.

use bitcoin::block::Header;
use bitcoin::BlockHash;
use electrum_client::{ElectrumApi as _, GetHeadersRes, Param};
use paywatch_core::BlockRef;
use serde_json::Value;

use super::ask::Call;
use super::conn::Conn;
use super::{ElectrumError, Inner};

pub(super) const HEADER_LEN: usize = 80;

#[derive(Debug, Clone)]
pub(super) struct Tip {
    pub(super) height: u64,
    pub(super) hash: BlockHash,
    pub(super) header: Header,
}

impl Tip {
    pub(super) fn block_ref(&self) -> BlockRef {
        block_ref(self.height, &self.header)
    }
}

impl Inner {
    /// The server's tip, fresh.
    pub(super) fn best(&self, conn: &mut Conn) -> Result<Tip, ElectrumError> {
        const METHOD: &str = "blockchain.headers.subscribe";
        let raw = conn
            .client
            .block_headers_subscribe_raw()
            .map_err(|e| self.error(METHOD, e))?;
        // The subscription's own notifications are not needed: drop them.
        while conn
            .client
            .block_headers_pop_raw()
            .map_err(|e| self.error(METHOD, e))?
            .is_some()
        {}
        let height = u64::try_from(raw.height).map_err(|e| self.bad(METHOD, e.to_string()))?;
        let header = self.header(METHOD, &raw.header)?;
        Ok(Tip {
            height,
            hash: header.block_hash(),
            header,
        })
    }

    pub(super) fn header(&self, method: &str, bytes: &[u8]) -> Result<Header, ElectrumError> {
        if bytes.len() != HEADER_LEN {
            return Err(self.bad(
                method,
                format!("a header of {} bytes, not {HEADER_LEN}", bytes.len()),
            ));
        }
        bitcoin::consensus::deserialize(bytes).map_err(|e| self.bad(method, e.to_string()))
    }

    /// The headers at `heights` on the server's current chain; `None` past its tip.
    pub(super) fn headers_at(
        &self,
        conn: &mut Conn,
        heights: &[u64],
    ) -> Result<Vec<Option<Header>>, ElectrumError> {
        const METHOD: &str = "blockchain.block.headers";
        let calls = heights
            .iter()
            .map(|&h| {
                let h = usize::try_from(h).map_err(|e| self.bad(METHOD, e.to_string()))?;
                Ok(Call {
                    method: METHOD,
                    params: vec![Param::Usize(h), Param::Usize(1)],
                })
            })
            .collect::<Result<Vec<_>, ElectrumError>>()?;
        let mut out = Vec::with_capacity(heights.len());
        for answer in self.ask(conn, &calls)? {
            out.push(self.headers_in(answer?, 1)?.into_iter().next());
        }
        Ok(out)
    }

    /// The headers in an answer to `blockchain.block.headers` for `asked` of
    /// them: fewer past the server's tip (or its limit), never more.
    pub(super) fn headers_in(
        &self,
        answer: Value,
        asked: u64,
    ) -> Result<Vec<Header>, ElectrumError> {
        const METHOD: &str = "blockchain.block.headers";
        let got: GetHeadersRes =
            serde_json::from_value(answer).map_err(|e| self.bad(METHOD, e.to_string()))?;
        if got.count == 0 {
            return Ok(Vec::new());
        }
        if u64::try_from(got.count).map_or(true, |n| n > asked) {
            return Err(self.bad(
                METHOD,
                format!("{} headers for a request of {asked}", got.count),
            ));
        }
        if got.raw_headers.len() != got.count.saturating_mul(HEADER_LEN) {
            return Err(self.bad(
                METHOD,
                format!(
                    "{} bytes for {} headers of {HEADER_LEN}",
                    got.raw_headers.len(),
                    got.count
                ),
            ));
        }
        got.raw_headers
            .chunks_exact(HEADER_LEN)
            .map(|bytes| self.header(METHOD, bytes))
            .collect()
    }
}

pub(super) fn block_ref(height: u64, header: &Header) -> BlockRef {
    BlockRef {
        height,
        hash: header.block_hash().to_string(),
        // Like the node source: the genesis block has no parent.
        parent: if height == 0 {
            String::new()
        } else {
            header.prev_blockhash.to_string()
        },
    }
}
