use std::collections::HashSet;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::sync::RwLock;

use crate::Network;

/// The addresses one network's watcher looks for, kept in memory.
///
/// It holds a 128-bit digest of each normalized address instead of the string:
/// 16 bytes a slot keeps 10^6 watched addresses in tens of megabytes. A
/// digest collision could only make a source report a transfer to an address
/// nobody was issued, which ingest records and reconcile leaves unattributed,
/// so nothing is lost or credited by it.
#[derive(Debug)]
pub struct WatchSet {
    network: Network,
    keys: RwLock<HashSet<u128, BuildHasherDefault<IdentityHasher>>>,
}

impl WatchSet {
    pub fn new(network: Network) -> WatchSet {
        WatchSet {
            network,
            keys: RwLock::new(HashSet::default()),
        }
    }

    pub fn network(&self) -> Network {
        self.network
    }

    pub fn insert(&self, address: &str) -> bool {
        let key = self.key(address);
        self.keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key)
    }

    pub fn extend<'a>(&self, addresses: impl IntoIterator<Item = &'a str>) {
        let keys: Vec<u128> = addresses.into_iter().map(|a| self.key(a)).collect();
        let mut set = self.keys.write().unwrap_or_else(|p| p.into_inner());
        set.reserve(keys.len());
        set.extend(keys);
    }

    pub fn contains(&self, address: &str) -> bool {
        let key = self.key(address);
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
    }

    pub fn len(&self) -> usize {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn key(&self, address: &str) -> u128 {
        let normalized = self.network.normalize_address(address);
        let half = |salt: u8| {
            let mut h = DefaultHasher::new();
            salt.hash(&mut h);
            normalized.hash(&mut h);
            h.finish()
        };
        (u128::from(half(0x5a)) << 64) | u128::from(half(0xa5))
    }
}

/// The keys are already uniform digests; hashing them again is wasted work.
#[derive(Debug, Default)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_u128(&mut self, i: u128) {
        self.0 = (i as u64) ^ ((i >> 64) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_addresses_in_any_case_the_network_allows() {
        let eth = WatchSet::new(Network::Ethereum);
        eth.insert("0xAbC0000000000000000000000000000000000001");
        assert!(eth.contains("0xabc0000000000000000000000000000000000001"));
        assert!(!eth.contains("0xabc0000000000000000000000000000000000002"));

        let sol = WatchSet::new(Network::Solana);
        sol.insert("So1Abc");
        assert!(sol.contains("So1Abc"));
        assert!(!sol.contains("so1abc"));
        assert_eq!(sol.len(), 1);
    }
}
