//! The watched transactions in the server's mempool.

use std::collections::{BTreeSet, HashSet};

use bitcoin::Txid;
use paywatch_core::Unconfirmed;
use tracing::debug;

use super::conn::Conn;
use super::{ElectrumError, Inner, State};

impl Inner {
    pub(super) fn unconfirmed(
        &self,
        conn: &mut Conn,
        st: &mut State,
    ) -> Result<Unconfirmed, ElectrumError> {
        let snapshot = self.sync(conn, st)?;
        let entries = || {
            st.watched
                .iter()
                .filter_map(|w| w.history.as_ref())
                .flatten()
        };
        // ElectrumX may list a transaction just mined both ways for a moment.
        let mined: HashSet<&Txid> = entries().filter(|(_, h)| *h > 0).map(|(t, _)| t).collect();
        let txids: Vec<Txid> = entries()
            .filter(|(t, h)| *h <= 0 && !mined.contains(t))
            .map(|(t, _)| *t)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let fetched = self.fetch_txs(conn, st, &txids, true)?;
        let transfers = self.scan(st, &txids);
        // Nothing asked since the snapshot's tip was read: it still holds.
        let tip_held = !fetched || self.best(conn)?.hash == snapshot.hash;
        debug!(
            pool = txids.len(),
            watched = transfers.len(),
            "Electrum mempool read"
        );
        Ok(Unconfirmed {
            // A block in between moved transactions out: not a full picture.
            tip: if tip_held {
                snapshot.hash.to_string()
            } else {
                String::new()
            },
            transfers,
        })
    }
}
