//! Everything the status machine reads about one intent, as plain data:
//! its transfers, its settlement, support's decisions on it and the
//! network's finality. Loaded in one snapshot per pass.

use paywatch_core::{Amount, Asset, Method, Network};

use super::{Status, Tolerance};

/// A transfer as reconcile sees it: plain data, copied next to its intent's
/// other transfers so the status machine reads memory in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeenTransfer<'a> {
    /// The transfer's row id: rows are numbered in the order ingest recorded them.
    pub id: i64,
    pub network: Network,
    /// `None` for a token that is none of the payment methods.
    pub asset: Option<Asset>,
    pub txid: &'a str,
    /// A cheap digest of `txid`, so telling two payments apart rarely has
    /// to read the strings; equal digests are confirmed on the strings.
    pub txid_digest: u64,
    pub index: u32,
    pub amount: Amount,
    pub success: bool,
    pub block_height: u64,
    /// The final height from which it counts final: its block's, or later
    /// for a coinbase output (100 blocks).
    pub final_from: u64,
    /// 0 or less when the chain gave no time.
    pub block_time_ms: i64,
    /// The time of the next block on the chain; 0 when unknown (none yet,
    /// no time, or not looked up because the payment was seen in time).
    pub next_block_time_ms: i64,
    pub first_seen_ms: i64,
    /// When paywatch first counted the row's block final.
    pub final_at_ms: Option<i64>,
    pub orphaned: bool,
    /// Waiting in the node's mempool, in no block yet.
    pub unmined: bool,
}

impl SeenTransfer<'_> {
    /// The same payment as `other`: the same transaction output or log,
    /// whichever block (or the mempool) it was seen in.
    pub fn same_payment(&self, other: &SeenTransfer<'_>) -> bool {
        self.index == other.index
            && self.network == other.network
            && self.txid_digest == other.txid_digest
            && (std::ptr::eq(self.txid, other.txid) || self.txid == other.txid)
    }

    /// A token that is none of the payment methods' assets: address
    /// poisoning and look-alike dust land at busy addresses within hours.
    /// Recorded and shown on the case, it never changes an intent's status.
    pub fn is_spam(&self) -> bool {
        self.asset.is_none()
    }

    /// Still on the chain (or in the mempool) and successful: it moved money.
    pub fn live(&self) -> bool {
        self.success && !self.orphaned
    }

    pub fn is_final(&self, final_height: Option<u64>) -> bool {
        self.live() && !self.unmined && final_height.is_some_and(|h| self.final_from <= h)
    }

    /// Final now, or counted final once and still on the chain: what a
    /// settlement stands on. The final height falls without a reorg only
    /// when an operator makes finality stricter (`paywatch config apply`),
    /// which holds back money not yet settled and must not undo a
    /// settlement; a reorg orphans the row (and clears `final_at_ms`).
    pub fn stands_final(&self, final_height: Option<u64>) -> bool {
        self.is_final(final_height) || (self.live() && !self.unmined && self.final_at_ms.is_some())
    }
}

/// Who settled a reference, when it was not the intent at hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettledBy {
    Intent(i64),
    /// An order paid from the account's USD balance.
    Balance,
}

/// How a settlement came about, which says what it stands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The intent's own money, final and in time: it stands while that
    /// money still reaches the amount due.
    Chain,
    /// Support's decision (an accept, or the target of a reassign): it
    /// stands while every payment the decision named is still final, in
    /// whatever block. `None` for settlements made before decisions named
    /// their payments: nothing on chain can undo those.
    Support { decision: Option<i64> },
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Chain => "chain",
            Via::Support { .. } => "support",
        }
    }
}

/// This intent's own settlement of its reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettlementFacts<'a> {
    pub via: Via,
    pub settled_at_ms: i64,
    /// The highest transfer row id seen at the address when it settled.
    pub through: Option<i64>,
    pub reversed_at_ms: Option<i64>,
    /// For [`Via::Support`]: every row of every payment the decision named.
    pub basis: &'a [SeenTransfer<'a>],
    /// For [`Via::Support`]: how many distinct payments the decision named.
    pub basis_payments: usize,
    /// The tolerance in force when it settled, which judges it for as long
    /// as it stands; `None` for settlements made before terms were kept.
    pub tolerance: Option<Tolerance>,
    /// The dust floor in force when it settled (base units): same-asset
    /// money under it recorded after the settlement opens no case.
    pub dust_floor: Option<u128>,
}

/// What support may decide on a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Accept,
    RefundRequired,
    RefundSent,
    Reassign,
    Dismiss,
}

crate::reconcile::status::named!(Action, "action", {
    Accept => "accept",
    RefundRequired => "refund_required",
    RefundSent => "refund_sent",
    Reassign => "reassign",
    Dismiss => "dismiss",
});

/// A decision that closed the case (every action but `refund_sent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closing {
    pub decision: i64,
    pub action: Action,
    pub at_ms: i64,
    /// The highest transfer row id at the address when decided: money
    /// recorded later is new money for a person.
    pub through: Option<i64>,
    /// The other intent of a reassign.
    pub counterpart: Option<i64>,
}

/// Support accepted an overpayment's excess, crediting its worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptedExcess {
    pub decision: i64,
    /// The excess accepted, in base units of the intent's method.
    pub amount: u128,
    /// Its credit stands in the ledger now (credits less their taking back).
    pub credited: bool,
}

/// Support reassigned another intent's payment to this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reassigned {
    pub decision: i64,
    /// The intent whose address the payment went to.
    pub from: i64,
}

impl IntentFacts<'_> {
    /// Whether a transfer is final, by the finality of the network it is on.
    pub fn is_final(&self, t: &SeenTransfer<'_>) -> bool {
        t.is_final(self.final_height_of(t))
    }

    /// [`SeenTransfer::stands_final`], by the finality of its network.
    pub fn stands_final(&self, t: &SeenTransfer<'_>) -> bool {
        t.stands_final(self.final_height_of(t))
    }

    fn final_height_of(&self, t: &SeenTransfer<'_>) -> Option<u64> {
        if t.network == self.method.network() {
            self.final_height
        } else {
            self.twin_final_height
        }
    }
}

/// Everything the decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct IntentFacts<'a> {
    pub id: i64,
    pub method: Method,
    pub amount_due: Amount,
    /// The price: what an excess is worth, so dust is not put before a person.
    pub usd_cents: i64,
    pub expires_at_ms: i64,
    /// Money seen in time must be final by then to settle by itself.
    pub confirm_by_ms: i64,
    pub status: Status,
    /// This intent's settlement of its reference, if it made one.
    pub settlement: Option<SettlementFacts<'a>>,
    /// Support's latest closing decision on this intent.
    pub closing: Option<Closing>,
    /// A refund support required has been sent.
    pub refunded: bool,
    /// Why the refund's transaction, as the chain shows it, does not match
    /// what is owed (see `refund_check`): a case for a person.
    pub refund_mismatch: Option<&'a str>,
    /// Support accepted this intent's excess after it settled by its own
    /// money.
    pub accepted_excess: Option<AcceptedExcess>,
    /// Support reassigned another intent's payment to this one: the
    /// decision that settles it.
    pub reassigned_in: Option<Reassigned>,
    /// Another intent, or the balance, settled the same reference.
    pub reference_settled_by: Option<SettledBy>,
    /// The transfers at the intent's address, and at its twin on the other
    /// network, orphaned ones included.
    pub transfers: &'a [SeenTransfer<'a>],
    /// Every row of the payments support's decisions on this intent gave
    /// away (required for refund, reassigned to another intent): owed to
    /// someone else, so a settlement by the chain never stands on them.
    pub claimed_away: &'a [SeenTransfer<'a>],
    /// The network's final height; `None` until the watcher reported one.
    pub final_height: Option<u64>,
    /// The final height of the other network where the address has a twin
    /// (Ethereum and Tron): money sent there is final by that chain's rule.
    pub twin_final_height: Option<u64>,
    pub now_ms: i64,
    pub tolerance: Tolerance,
}
