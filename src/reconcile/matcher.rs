//! Attribution: which intent a transfer belongs to. An address is issued to
//! exactly one intent, so a transfer belongs to the intent holding its
//! (network, address), whatever its asset; the status machine then decides
//! whether it counts or is an exception.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use paywatch_core::Network;

/// Index from (network, address) to an intent's position in a batch.
#[derive(Debug, Default)]
pub struct Matcher<'a> {
    index: HashMap<(Network, &'a str), usize, BuildHasherDefault<FxHasher>>,
}

impl<'a> Matcher<'a> {
    /// `intents` yields each intent's network and normalized address, in batch order.
    pub fn new(intents: impl ExactSizeIterator<Item = (Network, &'a str)>) -> Matcher<'a> {
        let mut index =
            HashMap::with_capacity_and_hasher(intents.len(), BuildHasherDefault::default());
        for (position, key) in intents.enumerate() {
            index.insert(key, position);
        }
        Matcher { index }
    }

    /// The batch position of the intent that owns this address, if any.
    pub fn attribute(&self, network: Network, to_address: &str) -> Option<usize> {
        self.index.get(&(network, to_address)).copied()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// The rustc hasher: addresses are not attacker-chosen keys here (they are
/// our own issued addresses and a bounded batch), so speed wins over SipHash.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
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
    }
}
