//! Attribution: which intent a transfer belongs to. An address is issued to
//! exactly one intent, so a transfer belongs to the intent holding its
//! (network, address), whatever its asset; the status machine then decides
//! whether it counts or is an exception.
//!
//! Built for 10^6 intents: the table is open-addressed over 128-bit keyed
//! digests (one cache line per probe, no pointer to chase), and lookups are
//! issued in small batches so their memory loads overlap.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use paywatch_core::Network;

/// Index from (network, address) to an intent's position in a batch.
///
/// Keys are 128-bit digests under a per-process random seed. Reconcile only
/// groups rows the database already selected by exact address, and the
/// addresses are paywatch's own (derived or imported), not chosen by payers;
/// so the digest never decides whether money reaches an intent, only which of
/// the batch's own intents a row is grouped with, and a collision needs two of
/// our addresses to agree on 128 seeded bits. That allows a fast mixing hash
/// where the watch set, which sees payers' addresses, uses SipHash.
#[derive(Debug)]
pub struct Matcher {
    slots: Vec<Slot>,
    mask: usize,
    len: usize,
    seed: (u64, u64),
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    hi: u64,
    lo: u64,
    position: u32,
}

const EMPTY: u32 = u32::MAX;
const LOOKAHEAD: usize = 16;

impl Matcher {
    /// `intents` yields each intent's network and normalized address, in batch order.
    pub fn new<'a>(intents: impl ExactSizeIterator<Item = (Network, &'a str)>) -> Matcher {
        let capacity = (intents.len().max(1) * 2).next_power_of_two();
        let mut m = Matcher {
            slots: vec![
                Slot {
                    hi: 0,
                    lo: 0,
                    position: EMPTY
                };
                capacity
            ],
            mask: capacity - 1,
            len: 0,
            seed: random_seed(),
        };
        for (position, (network, address)) in intents.enumerate() {
            let (hi, lo) = m.digest(network, address);
            let mut i = hi as usize & m.mask;
            loop {
                let slot = &mut m.slots[i];
                if slot.position == EMPTY {
                    *slot = Slot {
                        hi,
                        lo,
                        position: position as u32,
                    };
                    m.len += 1;
                    break;
                }
                if slot.hi == hi && slot.lo == lo {
                    // The same address twice in one batch cannot happen (an
                    // address has one intent); keep the first.
                    break;
                }
                i = (i + 1) & m.mask;
            }
        }
        m
    }

    /// The batch position of the intent that owns this address, if any.
    pub fn attribute(&self, network: Network, to_address: &str) -> Option<usize> {
        let (hi, lo) = self.digest(network, to_address);
        self.probe(hi, lo)
    }

    /// Attributes many transfers at once; `out[i]` is the owner of the i-th.
    pub fn attribute_all<'a>(
        &self,
        transfers: impl Iterator<Item = (Network, &'a str)>,
        out: &mut Vec<Option<u32>>,
    ) {
        let mut digests = [(0u64, 0u64); LOOKAHEAD];
        let mut pending = 0;
        for (network, address) in transfers {
            digests[pending] = self.digest(network, address);
            pending += 1;
            if pending == LOOKAHEAD {
                // Digests first, probes after: the probes' cache misses are
                // independent and the CPU overlaps them.
                out.extend(
                    digests
                        .iter()
                        .map(|(hi, lo)| self.probe(*hi, *lo).map(|p| p as u32)),
                );
                pending = 0;
            }
        }
        out.extend(
            digests[..pending]
                .iter()
                .map(|(hi, lo)| self.probe(*hi, *lo).map(|p| p as u32)),
        );
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn probe(&self, hi: u64, lo: u64) -> Option<usize> {
        let mut i = hi as usize & self.mask;
        loop {
            let slot = &self.slots[i];
            if slot.position == EMPTY {
                return None;
            }
            if slot.hi == hi && slot.lo == lo {
                return Some(slot.position as usize);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Two independently seeded lanes over the address's 8-byte words,
    /// each finished with the murmur3 avalanche.
    #[inline]
    fn digest(&self, network: Network, address: &str) -> (u64, u64) {
        let bytes = address.as_bytes();
        let mut a = self.seed.0 ^ (network as u64) ^ ((bytes.len() as u64) << 8);
        let mut b = self.seed.1 ^ (network as u64) ^ ((bytes.len() as u64) << 8);
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            a = (a ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
            b = (b ^ w.rotate_left(32))
                .wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
                .rotate_left(31);
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            let w = u64::from_le_bytes(buf);
            a = (a ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
            b = (b ^ w.rotate_left(32))
                .wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
                .rotate_left(31);
        }
        (fmix64(a ^ b.rotate_left(17)), fmix64(b ^ a.rotate_left(43)))
    }
}

fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// A seed nobody outside this process knows, from the standard library's
/// randomly keyed hasher.
fn random_seed() -> (u64, u64) {
    let state = RandomState::new();
    let half = |salt: u8| {
        let mut h = state.build_hasher();
        h.write_u8(salt);
        h.finish()
    };
    (half(1), half(2))
}

/// Transfers grouped by owning intent, without moving them: `members` lists
/// transfer indices, intent by intent, and intent `i`'s run is
/// `members[offsets[i]..offsets[i + 1]]`.
#[derive(Debug, Default)]
pub struct Grouping {
    pub offsets: Vec<u32>,
    pub members: Vec<u32>,
}

impl Grouping {
    /// A counting sort of `owners` (one entry per transfer) over `intents` owners.
    pub fn by_owner(owners: &[Option<u32>], intents: usize) -> Grouping {
        let mut offsets = vec![0u32; intents + 1];
        for o in owners.iter().flatten() {
            offsets[*o as usize + 1] += 1;
        }
        for i in 0..intents {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut members = vec![0u32; offsets[intents] as usize];
        for (t, o) in owners.iter().enumerate() {
            if let Some(o) = o {
                let at = &mut fill[*o as usize];
                members[*at as usize] = t as u32;
                *at += 1;
            }
        }
        Grouping { offsets, members }
    }

    pub fn of(&self, intent: usize) -> &[u32] {
        &self.members[self.offsets[intent] as usize..self.offsets[intent + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_by_network_and_address_only() {
        let m = Matcher::new(
            [
                (Network::Ethereum, "0xaa"),
                (Network::Tron, "0xaa"),
                (Network::Bitcoin, "bc1q"),
            ]
            .into_iter(),
        );
        assert_eq!(m.attribute(Network::Ethereum, "0xaa"), Some(0));
        assert_eq!(m.attribute(Network::Tron, "0xaa"), Some(1));
        assert_eq!(m.attribute(Network::Litecoin, "bc1q"), None);
        assert_eq!(m.attribute(Network::Bitcoin, "bc1x"), None);
        let mut out = Vec::new();
        m.attribute_all(
            (0..40).map(|i| {
                if i % 2 == 0 {
                    (Network::Tron, "0xaa")
                } else {
                    (Network::Tron, "0xbb")
                }
            }),
            &mut out,
        );
        assert_eq!(out.len(), 40);
        assert!(out.iter().step_by(2).all(|o| *o == Some(1)));
        assert!(out.iter().skip(1).step_by(2).all(|o| o.is_none()));
    }

    #[test]
    fn groups_transfers_by_owner_in_order() {
        let g = Grouping::by_owner(&[Some(2), None, Some(0), Some(2)], 3);
        assert_eq!(g.of(0), &[2]);
        assert_eq!(g.of(1), &[] as &[u32]);
        assert_eq!(g.of(2), &[0, 3]);
    }
}
