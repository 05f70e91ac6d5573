//! `paywatch extract`: the payments a raw block file holds for some
//! addresses, read through the very parser and scan the watcher uses, so an
//! operator can answer "why was this payment not seen?" from a block file.

use std::sync::Arc;

use paywatch_core::{Network, Transfer, WatchSet};

use crate::address::script_for_address;
use crate::block::{from_hex, RawBlock};
use crate::params::Params;
use crate::scan::{scan_block, watch_key};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    #[error("{network} does not have raw blocks this tool reads (bitcoin, litecoin)")]
    Network { network: Network },
    #[error("a --watch address is not usable")]
    Address(#[from] crate::address::AddressError),
    #[error("give at least one --watch address")]
    NothingWatched,
    #[error("{file}: {why}")]
    File { file: String, why: String },
}

/// One payment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPayment {
    pub file: String,
    pub block: String,
    pub transfer: Transfer,
}

/// Every output paying one of `watch` in the blocks `files` (name, bytes);
/// a file may hold the block as hex text or as binary.
pub fn extract(
    network: Network,
    files: &[(String, Vec<u8>)],
    watch: &[String],
) -> Result<Vec<FoundPayment>, ExtractError> {
    if !Params::serves(network) {
        return Err(ExtractError::Network { network });
    }
    if watch.is_empty() {
        return Err(ExtractError::NothingWatched);
    }
    let mut chain = None;
    for address in watch {
        let (c, _) = script_for_address(network, address)?;
        chain.get_or_insert(c);
    }
    let params = Params::new(network, chain.expect("one address at least"))
        .expect("served networks have params");
    let set = WatchSet::new(network).keyed(watch_key(network));
    set.extend(watch.iter().map(String::as_str));
    let set = Arc::new(set);

    let mut found = Vec::new();
    for (file, raw) in files {
        let fail = |why: String| ExtractError::File {
            file: file.clone(),
            why,
        };
        if raw.first() == Some(&b'{') {
            return Err(fail(
                "this is JSON; give the raw block, hex or binary, as `getblock HASH 0` prints it"
                    .into(),
            ));
        }
        let bytes = if looks_like_hex(raw) {
            from_hex(std::str::from_utf8(raw).expect("hex is ASCII"))
                .map_err(|e| fail(e.to_string()))?
        } else {
            raw.clone()
        };
        let block = RawBlock::parse(&bytes).map_err(|e| fail(format!("not a whole block: {e}")))?;
        block
            .verify(None)
            .map_err(|e| fail(format!("corrupt block: {e}")))?;
        let hash = block.hash().to_string();
        // Printed as the watcher records them (Litecoin's legacy 3… P2SH as
        // its M… twin), so what an operator reads here is what the database holds.
        for t in scan_block(&block, &params, &set.read()) {
            found.push(FoundPayment {
                file: file.clone(),
                block: hash.clone(),
                transfer: t,
            });
        }
    }
    Ok(found)
}

fn looks_like_hex(raw: &[u8]) -> bool {
    !raw.is_empty()
        && raw
            .iter()
            .all(|b| b.is_ascii_hexdigit() || b.is_ascii_whitespace())
}
