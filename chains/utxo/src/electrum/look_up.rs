//! Addresses that left the watch set (dormant) are looked up now and then:
//! one `get_history` each, with no subscription, so they cost the server
//! nothing between sweeps and never count against its subscription limit.

use bitcoin::hex::DisplayHex as _;
use electrum_client::{GetHistoryRes, Param, ToElectrumScriptHash};
use paywatch_core::{Activity, Probe};
use tracing::warn;

use super::ask::Call;
use super::conn::Conn;
use super::{ElectrumError, Inner};
use crate::address::script_for_address;

const METHOD: &str = "blockchain.scripthash.get_history";

impl Inner {
    pub(super) fn activity_after(
        &self,
        conn: &mut Conn,
        probes: &[Probe],
    ) -> Result<Vec<Activity>, ElectrumError> {
        let network = self.cfg.params.network;
        let mut out = Vec::with_capacity(probes.len());
        for chunk in probes.chunks(self.batch_size()) {
            // An address no script can be made of was never watched either
            // (see `take_in_addresses`): nothing to look up.
            let scripts: Vec<Option<bitcoin::ScriptBuf>> = chunk
                .iter()
                .map(|p| script_for_address(network, &p.address).ok().map(|(_, s)| s))
                .collect();
            let calls: Vec<Call> = scripts
                .iter()
                .flatten()
                .map(|s| Call {
                    method: METHOD,
                    params: vec![Param::String(
                        s.to_electrum_scripthash().as_slice().to_lower_hex_string(),
                    )],
                })
                .collect();
            let mut answers = self.ask(conn, &calls)?.into_iter();
            for (probe, script) in chunk.iter().zip(&scripts) {
                if script.is_none() {
                    out.push(Activity::Quiet);
                    continue;
                }
                let answer = answers
                    .next()
                    .ok_or_else(|| self.bad(METHOD, "fewer answers than requests".to_owned()))?;
                let history = answer.and_then(|a| {
                    serde_json::from_value::<Vec<GetHistoryRes>>(a)
                        .map_err(|e| self.bad(METHOD, e.to_string()))
                });
                out.push(match history {
                    Ok(history) => {
                        let heights: Vec<i32> = history.iter().map(|h| h.height).collect();
                        activity_in(&heights, probe.watched_to)
                    }
                    // The server will not say (a history too large, say):
                    // the address is watched live again, and the blocks
                    // since it left are read again for it, rather than a
                    // payment there go unseen.
                    Err(e) => {
                        warn!(address = %probe.address, error = %e,
                            "a dormant address could not be looked up; it is watched again");
                        Activity::InBlock(probe.watched_to + 1)
                    }
                });
            }
        }
        Ok(out)
    }
}

/// A history's heights (0 and -1: in the mempool) against the last block
/// read with the address watched.
fn activity_in(heights: &[i32], watched_to: u64) -> Activity {
    let newest_block = heights
        .iter()
        .filter_map(|h| u64::try_from(*h).ok().filter(|h| *h > watched_to))
        .min();
    match newest_block {
        Some(h) => Activity::InBlock(h),
        None if heights.iter().any(|h| *h <= 0) => Activity::Unconfirmed,
        None => Activity::Quiet,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_came_after_the_last_block_read_is_activity() {
        assert_eq!(activity_in(&[], 100), Activity::Quiet);
        assert_eq!(activity_in(&[40, 100], 100), Activity::Quiet);
        assert_eq!(activity_in(&[40, 0], 100), Activity::Unconfirmed);
        assert_eq!(activity_in(&[40, -1], 100), Activity::Unconfirmed);
        assert_eq!(activity_in(&[40, 130, 101, 0], 100), Activity::InBlock(101));
    }
}
