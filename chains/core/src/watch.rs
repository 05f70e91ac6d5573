use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::Network;

/// Turns an address into the bytes a chain's blocks show for it (a
/// scriptPubKey for Bitcoin and Litecoin), so a source can test raw
/// outputs without encoding each one as an address. `None`: no such form.
pub type WatchKeyFn = Arc<dyn Fn(&str) -> Option<Vec<u8>> + Send + Sync>;

/// The addresses one network's watcher looks for, kept in memory.
///
/// It holds a 128-bit digest of each normalized address (or of its chain
/// form, see [`WatchSet::keyed`]) instead of the string: 16 bytes a slot
/// keeps 10^6 watched addresses in tens of megabytes. A digest collision
/// could only make a source report a transfer to an address nobody was
/// issued, which ingest records and reconcile leaves unattributed, so
/// nothing is lost or credited by it.
pub struct WatchSet {
    network: Network,
    keys: RwLock<HashSet<u128, BuildHasherDefault<IdentityHasher>>>,
    key_fn: Option<WatchKeyFn>,
    /// Kept only for sources that must name each address to their backend
    /// (Electrum asks per address); the rest pay nothing for it.
    listed: Option<RwLock<Listed>>,
}

/// The listed addresses in the order they came. Appending keeps the
/// generation, so a source that took in the first `n` takes in the rest;
/// a removal starts a new one, and the source takes the list in afresh.
#[derive(Default)]
struct Listed {
    generation: u64,
    addresses: Vec<String>,
}

/// What changed in a listing set since a source last looked
/// ([`WatchSet::listing_since`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// The same generation: these came after the ones already taken in.
    Appended(Vec<String>),
    /// Addresses left the set: this is the whole list now.
    Rebuilt {
        generation: u64,
        addresses: Vec<String>,
    },
}

impl Listing {
    /// Nothing new to take in.
    pub fn is_unchanged(&self) -> bool {
        matches!(self, Listing::Appended(fresh) if fresh.is_empty())
    }
}

impl fmt::Debug for WatchSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchSet")
            .field("network", &self.network)
            .field("len", &self.len())
            .field("keyed", &self.key_fn.is_some())
            .field("listed", &self.listed.is_some())
            .finish()
    }
}

impl WatchSet {
    pub fn new(network: Network) -> WatchSet {
        WatchSet {
            network,
            keys: RwLock::new(HashSet::default()),
            key_fn: None,
            listed: None,
        }
    }

    /// Digests each address in the form `key_fn` gives it, so sources can
    /// look raw chain data up with [`WatchRead::contains_key`]. Addresses
    /// `key_fn` cannot read are digested as text, and never match raw data.
    #[must_use]
    pub fn keyed(mut self, key_fn: WatchKeyFn) -> WatchSet {
        self.key_fn = Some(key_fn);
        self
    }

    /// Also keeps every address as text, for [`WatchSet::addresses_from`].
    #[must_use]
    pub fn listing(mut self) -> WatchSet {
        self.listed = Some(RwLock::new(Listed::default()));
        self
    }

    pub fn network(&self) -> Network {
        self.network
    }

    pub fn insert(&self, address: &str) -> bool {
        let key = self.key(address);
        let new = self
            .keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
        if new {
            self.list(std::iter::once(address));
        }
        new
    }

    pub fn extend<'a>(&self, addresses: impl IntoIterator<Item = &'a str>) {
        let addresses: Vec<&str> = addresses.into_iter().collect();
        let keys: Vec<u128> = addresses.iter().map(|a| self.key(a)).collect();
        let mut set = self.keys.write().unwrap_or_else(|p| p.into_inner());
        set.reserve(keys.len());
        let fresh: Vec<&str> = addresses
            .into_iter()
            .zip(keys)
            .filter(|(_, k)| set.insert(*k))
            .map(|(a, _)| a)
            .collect();
        drop(set);
        self.list(fresh);
    }

    fn list<'a>(&self, fresh: impl IntoIterator<Item = &'a str>) {
        if let Some(listed) = &self.listed {
            let mut listed = listed.write().unwrap_or_else(|p| p.into_inner());
            listed.addresses.extend(
                fresh
                    .into_iter()
                    .map(|a| self.network.normalize_address(a).into_owned()),
            );
        }
    }

    pub fn contains(&self, address: &str) -> bool {
        self.read().contains(address)
    }

    /// One read lock for many lookups, such as every output of a block.
    pub fn read(&self) -> WatchRead<'_> {
        WatchRead {
            set: self,
            keys: self.keys.read().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// Whether this set keeps its addresses as text.
    pub fn is_listing(&self) -> bool {
        self.listed.is_some()
    }

    /// The addresses added after the first `from`, in the order they came;
    /// empty unless the set was made [`listing`](WatchSet::listing).
    pub fn addresses_from(&self, from: usize) -> Vec<String> {
        match &self.listed {
            Some(l) => l
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .addresses
                .get(from..)
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// What a source that took in the first `from` addresses of
    /// `generation` has to take in now. Empty unless the set was made
    /// [`listing`](WatchSet::listing).
    pub fn listing_since(&self, generation: u64, from: usize) -> Listing {
        let Some(l) = &self.listed else {
            return Listing::Appended(Vec::new());
        };
        let l = l.read().unwrap_or_else(|p| p.into_inner());
        if l.generation == generation {
            Listing::Appended(
                l.addresses
                    .get(from..)
                    .map(<[String]>::to_vec)
                    .unwrap_or_default(),
            )
        } else {
            Listing::Rebuilt {
                generation: l.generation,
                addresses: l.addresses.clone(),
            }
        }
    }

    /// Takes addresses out of the set: the watcher looks them up now and
    /// then instead (dormant addresses). Returns how many were in it. In a
    /// listing set the rest keep their order under a new generation.
    pub fn remove<'a>(&self, addresses: impl IntoIterator<Item = &'a str>) -> usize {
        let keys: Vec<u128> = addresses.into_iter().map(|a| self.key(a)).collect();
        let mut set = self.keys.write().unwrap_or_else(|p| p.into_inner());
        let gone: HashSet<u128, BuildHasherDefault<IdentityHasher>> =
            keys.into_iter().filter(|k| set.remove(k)).collect();
        if gone.is_empty() {
            return 0;
        }
        // An insert racing this may leave its address listed though not in
        // the keys: looked at once more by the source, never missed.
        if let Some(listed) = &self.listed {
            let mut listed = listed.write().unwrap_or_else(|p| p.into_inner());
            listed.addresses.retain(|a| !gone.contains(&self.key(a)));
            listed.generation += 1;
        }
        gone.len()
    }

    pub fn len(&self) -> usize {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// About how many bytes the set holds on the heap: its table (a digest
    /// and a control byte a slot) and, when listing, each address's text.
    pub fn heap_bytes(&self) -> usize {
        let slots = self
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .capacity();
        let table = slots * (std::mem::size_of::<u128>() + 1);
        let listed = self.listed.as_ref().map_or(0, |l| {
            let l = l.read().unwrap_or_else(|p| p.into_inner());
            l.addresses.capacity() * std::mem::size_of::<String>()
                + l.addresses.iter().map(String::capacity).sum::<usize>()
        });
        table + listed
    }

    fn key(&self, address: &str) -> u128 {
        if let Some(raw) = self.key_fn.as_ref().and_then(|f| f(address)) {
            return digest(0x01, &raw);
        }
        let normalized = self.network.normalize_address(address);
        digest(0x00, normalized.as_bytes())
    }
}

/// A held read lock on a [`WatchSet`].
pub struct WatchRead<'a> {
    set: &'a WatchSet,
    keys: RwLockReadGuard<'a, HashSet<u128, BuildHasherDefault<IdentityHasher>>>,
}

impl fmt::Debug for WatchRead<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchRead").field("set", self.set).finish()
    }
}

impl WatchRead<'_> {
    pub fn contains(&self, address: &str) -> bool {
        self.keys.contains(&self.set.key(address))
    }

    /// Looks up raw chain bytes (a scriptPubKey) in a [`keyed`](WatchSet::keyed) set.
    pub fn contains_key(&self, raw: &[u8]) -> bool {
        self.keys.contains(&digest(0x01, raw))
    }
}

/// Two independent 64-bit SipHashes; the domain byte keeps raw keys and
/// address text from ever colliding by construction.
fn digest(domain: u8, bytes: &[u8]) -> u128 {
    let half = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        domain.hash(&mut h);
        bytes.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0x5a)) << 64) | u128::from(half(0xa5))
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

    #[test]
    fn a_keyed_set_finds_raw_chain_forms_and_lists_only_new_addresses() {
        let key_fn: WatchKeyFn =
            Arc::new(|a: &str| a.strip_prefix("addr:").map(|k| k.as_bytes().to_vec()));
        let set = WatchSet::new(Network::Bitcoin).keyed(key_fn).listing();
        assert!(set.insert("addr:script1"));
        assert!(!set.insert("addr:script1"));
        set.extend(["addr:script2", "addr:script1", "unreadable"]);
        let read = set.read();
        assert!(read.contains_key(b"script1"));
        assert!(read.contains_key(b"script2"));
        assert!(!read.contains_key(b"unreadable"));
        assert!(read.contains("addr:script2"));
        assert!(read.contains("unreadable"));
        drop(read);
        assert_eq!(
            set.addresses_from(0),
            ["addr:script1", "addr:script2", "unreadable"]
        );
        assert_eq!(set.addresses_from(2), ["unreadable"]);
        assert!(set.addresses_from(9).is_empty());
    }

    #[test]
    fn a_removal_starts_a_new_listing_without_the_addresses_removed() {
        let set = WatchSet::new(Network::Litecoin).listing();
        set.extend(["a", "b", "c"]);
        assert!(set.listing_since(0, 3).is_unchanged());
        assert_eq!(set.remove(["b", "never-there"]), 1);
        assert!(!set.contains("b"));
        assert!(set.contains("a") && set.contains("c"));
        assert_eq!(set.len(), 2);
        assert_eq!(
            set.listing_since(0, 3),
            Listing::Rebuilt {
                generation: 1,
                addresses: vec!["a".to_owned(), "c".to_owned()],
            }
        );
        // Back in the set, it is appended to the new generation.
        assert!(set.insert("b"));
        assert_eq!(
            set.listing_since(1, 2),
            Listing::Appended(vec!["b".to_owned()])
        );
        assert_eq!(set.remove(["zz"]), 0, "nothing removed, no new generation");
        assert!(set.listing_since(1, 3).is_unchanged());
    }
}
