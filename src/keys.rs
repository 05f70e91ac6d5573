//! Derivation keys: the configured account key must be the one that derived
//! the addresses already issued, and changing it is a deliberate rotation.
//!
//! Without this, an instance started with another key (a typo, a staging
//! key, a half-finished rotation) would issue addresses of a wallet nobody
//! watches for, interleaved on one counter with the right key's; and a new
//! key would go on from the old key's last index, past the gap limit of any
//! wallet that imports it. A key is named by its fingerprint: a hash of the
//! first addresses it derives, so the same key written as xpub or zpub is
//! one key, and a change in how addresses are derived is a different one.

use std::collections::HashMap;
use std::sync::Arc;

use paywatch_core::Network;
use sha2::{Digest, Sha256};

use crate::intents::AddressDeriver;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("networks.{network}.account_key cannot derive index {index}: {why}")]
    Derivation {
        network: Network,
        index: i64,
        why: String,
    },
    #[error(
        "networks.{network}.account_key does not derive the addresses already issued on \
         {network}: index {index} is {stored}, the configured key derives {derived}. It is not \
         the key that issued them; configure that key (README, Keys and rotation)"
    )]
    DoesNotDerive {
        network: Network,
        index: i64,
        stored: String,
        derived: String,
    },
    #[error(
        "networks.{network}.account_key (fingerprint {configured}) is not the key in use on \
         {network} (fingerprint {in_use}): another instance may run with a different key. If \
         this is a key rotation, run `paywatch keys rotate --network {network}` once with the \
         new key configured (README, Keys and rotation)"
    )]
    NotTheKeyInUse {
        network: Network,
        configured: String,
        in_use: String,
    },
    #[error(
        "networks.{network}.account_key (fingerprint {fingerprint}) was retired by a rotation \
         at {retired_at} ms: configure the key in use"
    )]
    Retired {
        network: Network,
        fingerprint: String,
        retired_at: i64,
    },
    #[error("networks.{network}.account_key is already the key in use (fingerprint {fingerprint}): nothing to rotate")]
    AlreadyInUse {
        network: Network,
        fingerprint: String,
    },
    #[error("networks.{network} has no account_key: configure the new key, then rotate")]
    NoKey { network: Network },
}

/// The fingerprint of the key behind `deriver`: the first 16 hex digits of
/// SHA-256 over the network and its addresses at indexes 0 and 1.
pub fn fingerprint(network: Network, deriver: &dyn AddressDeriver) -> Result<String, KeyError> {
    let mut hash = Sha256::new();
    hash.update(network.as_str().as_bytes());
    for index in 0..2u32 {
        let address = deriver.derive(index).map_err(|why| KeyError::Derivation {
            network,
            index: i64::from(index),
            why,
        })?;
        hash.update([0]);
        hash.update(network.normalize_address(&address).as_bytes());
    }
    Ok(hex::encode(&hash.finalize()[..8]))
}

/// Each deriving network's key, as checked at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInUse {
    pub network: Network,
    pub fingerprint: String,
    pub next_index: i64,
    /// The stored addresses had no key recorded (from before fingerprints
    /// were kept) and are now recorded as this key's.
    pub adopted: bool,
}

/// Checks, for every network that derives, that the configured key is the
/// key in use and still derives the stored addresses (the lowest and the
/// highest index it issued); adopts the stored addresses and counter when
/// none was recorded yet. Refuses, naming the network and what to do,
/// otherwise.
pub async fn check_keys(
    store: &Store,
    derivers: &HashMap<Network, Arc<dyn AddressDeriver>>,
) -> Result<Vec<KeyInUse>, KeyError> {
    let mut networks: Vec<&Network> = derivers.keys().collect();
    networks.sort();
    let mut keys = Vec::new();
    for network in networks {
        let network = *network;
        let deriver = derivers[&network].as_ref();
        let configured = fingerprint(network, deriver)?;
        let mut tx = store.begin().await?;
        let counter = store.derivation_counter(&mut tx, network).await?;
        let recorded = counter.as_ref().and_then(|c| c.key_fingerprint.clone());
        match recorded.as_deref() {
            Some(in_use) if in_use != configured => {
                return Err(
                    match store.key_retired_at(&mut tx, network, &configured).await? {
                        Some(retired_at) => KeyError::Retired {
                            network,
                            fingerprint: configured,
                            retired_at,
                        },
                        None => KeyError::NotTheKeyInUse {
                            network,
                            configured,
                            in_use: in_use.to_owned(),
                        },
                    },
                );
            }
            _ => {}
        }
        for (index, stored) in store
            .derived_samples(&mut tx, network, recorded.as_deref())
            .await?
        {
            let child = u32::try_from(index).map_err(|_| KeyError::Derivation {
                network,
                index,
                why: "not a child index".into(),
            })?;
            let derived = deriver.derive(child).map_err(|why| KeyError::Derivation {
                network,
                index,
                why,
            })?;
            let derived = network.normalize_address(&derived).into_owned();
            if derived != stored {
                return Err(KeyError::DoesNotDerive {
                    network,
                    index,
                    stored,
                    derived,
                });
            }
        }
        let adopted = recorded.is_none();
        if adopted {
            store.adopt_key(&mut tx, network, &configured).await?;
        }
        tx.commit().await.map_err(StoreError::from)?;
        keys.push(KeyInUse {
            network,
            fingerprint: configured,
            next_index: counter.map_or(0, |c| c.next_index),
            adopted,
        });
    }
    Ok(keys)
}

/// What a rotation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    pub network: Network,
    pub retired: String,
    /// The first index the retired key never derived.
    pub retired_next_index: i64,
    pub fingerprint: String,
}

/// Makes the configured key the key in use on `network`, from index 0; the
/// old key is retired with its last index, and the addresses it derived
/// stay watched. Every instance must run with the new key afterwards: one
/// still on the old key refuses to start, and cannot issue an address.
pub async fn rotate(
    store: &Store,
    network: Network,
    deriver: Option<&Arc<dyn AddressDeriver>>,
    now_ms: i64,
) -> Result<Rotation, KeyError> {
    let deriver = deriver.ok_or(KeyError::NoKey { network })?;
    let configured = fingerprint(network, deriver.as_ref())?;
    let mut tx = store.begin().await?;
    let counter = store.derivation_counter(&mut tx, network).await?.unwrap_or(
        crate::store::DerivationCounter {
            next_index: 0,
            key_fingerprint: None,
        },
    );
    let retired = counter
        .key_fingerprint
        .clone()
        .unwrap_or_else(|| "unrecorded".to_owned());
    if retired == configured {
        return Err(KeyError::AlreadyInUse {
            network,
            fingerprint: configured,
        });
    }
    if let Some(retired_at) = store.key_retired_at(&mut tx, network, &configured).await? {
        return Err(KeyError::Retired {
            network,
            fingerprint: configured,
            retired_at,
        });
    }
    if counter.key_fingerprint.is_none() {
        // Addresses from before fingerprints were kept belong to the key
        // being retired: name them so, or the new key would adopt them.
        store.adopt_key(&mut tx, network, &retired).await?;
    }
    store
        .rotate_key(&mut tx, network, &counter, &retired, &configured, now_ms)
        .await?;
    tx.commit().await.map_err(StoreError::from)?;
    Ok(Rotation {
        network,
        retired,
        retired_next_index: counter.next_index,
        fingerprint: configured,
    })
}
