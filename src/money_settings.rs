//! Configuration agreement: every instance settles money under the same
//! rules. The settings that decide when money counts on a network
//! (confirmations and finality, the reorg window, the confirm-by window,
//! tolerances, dust floors, the intent expiry, token contracts and chain id) are pinned
//! in the database per network. The first instance to start pins its own;
//! only `paywatch config apply` changes them. An instance configured
//! otherwise refuses to start, and one that was running when they changed
//! never takes the network's lease again, so a stale instance cannot settle
//! at a depth nobody chose.
//!
//! Applying stricter finality counts no money final that the new rules
//! would not: the network's final height is cleared, and its lease fenced,
//! so the next holder (with the new rules) sets it again. What already
//! settled stays settled (a settlement is undone only by a reorg).

use std::collections::BTreeMap;

use paywatch_core::Network;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::settings::{Settings, SettingsError};
use crate::store::{PinnedMoney, Store, StoreError};

/// The first 16 hex digits of SHA-256: names a configuration, not a secret.
pub fn short_hash(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

/// One network's money-relevant settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoneySettings {
    pub network: Network,
    /// As JSON with sorted keys: what is pinned and compared.
    pub json: String,
    pub fingerprint: String,
}

impl MoneySettings {
    pub fn of(settings: &Settings, network: Network) -> Result<MoneySettings, SettingsError> {
        let ns = settings.network(network).ok_or_else(|| {
            SettingsError::Invalid(format!("networks.{network} is not configured"))
        })?;
        let tolerances: BTreeMap<String, String> = settings
            .tolerances()?
            .into_iter()
            .filter(|(method, _)| method.network() == network)
            .map(|(method, t)| {
                (
                    method.asset().to_string(),
                    format!(
                        "{} bp{}",
                        t.basis_points,
                        t.max
                            .map(|m| format!(", at most {}", m.0))
                            .unwrap_or_default()
                    ),
                )
            })
            .collect();
        let dust_floors: BTreeMap<String, String> = settings
            .dust_floors()?
            .into_iter()
            .filter(|(method, _)| method.network() == network)
            .map(|(method, floor)| (method.asset().to_string(), floor.0.to_string()))
            .collect();
        let mut value = json!({
            "confirmations": ns.confirmations,
            "finality": ns.finality,
            "chain_id": ns.chain_id,
            "max_reorg_depth": ns.max_reorg_depth,
            "confirm_within_secs": ns.confirm_within_secs,
            "contracts": ns.contracts,
            "tolerance": tolerances,
            "intent_expiry_secs": settings.intents.expiry_secs,
        });
        // Only when set: a network without one keeps the fingerprint it
        // had before dust floors existed, so an upgrade pins nothing anew.
        if !dust_floors.is_empty() {
            value["dust_floor"] = json!(dust_floors);
        }
        // serde_json's maps are sorted (no preserve_order), so equal
        // settings give equal text.
        let json = value.to_string();
        Ok(MoneySettings {
            network,
            fingerprint: short_hash(json.as_bytes()),
            json,
        })
    }
}

/// What differs between two settings' JSON, one `key: old → new` each.
pub fn differences(pinned: &str, configured: &str) -> Vec<String> {
    let parse = |text: &str| -> BTreeMap<String, Value> {
        serde_json::from_str::<serde_json::Map<String, Value>>(text)
            .map(|m| m.into_iter().collect())
            .unwrap_or_default()
    };
    let (old, new) = (parse(pinned), parse(configured));
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| {
            let show = |v: Option<&Value>| v.map_or("(none)".to_owned(), Value::to_string);
            format!("{k}: {} → {}", show(old.get(k)), show(new.get(k)))
        })
        .collect()
}

/// How many blocks the final height must fall so that no money counts
/// final that `configured` would not count: the rise in confirmations, or,
/// when the kind of finality (or the chain) changed, the whole reorg window
/// (finality is never deeper). `None`: nothing to lower.
fn finality_drop(pinned: &str, configured: &str) -> Option<i64> {
    let parse = |text: &str| serde_json::from_str::<Value>(text).unwrap_or(Value::Null);
    let (old, new) = (parse(pinned), parse(configured));
    let kind_changed = ["finality", "chain_id"].iter().any(|k| old[k] != new[k]);
    if kind_changed {
        return new["max_reorg_depth"].as_i64().filter(|d| *d > 0);
    }
    let rise = new["confirmations"].as_i64()? - old["confirmations"].as_i64()?;
    (rise > 0).then_some(rise)
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgreementError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(
        "networks.{network}: this configuration settles money differently from the settings in \
         force since {applied_at} ms (applied by {applied_by}): {}. Fix the configuration, or, \
         if the change is intended, run `paywatch config apply` with it first (README, \
         Configuration agreement)",
        differences.join("; ")
    )]
    Differs {
        network: Network,
        applied_at: i64,
        applied_by: String,
        differences: Vec<String>,
    },
}

/// At start: pins each enabled network's settings where none are pinned,
/// records the instance, and refuses settings that differ from those
/// pinned, naming each difference.
pub async fn agree_at_start(
    store: &Store,
    settings: &Settings,
    instance: &str,
    now_ms: i64,
) -> Result<(), AgreementError> {
    store
        .record_instance(
            instance,
            env!("CARGO_PKG_VERSION"),
            &settings.config_hash,
            now_ms,
        )
        .await?;
    for network in settings.enabled_networks() {
        let own = MoneySettings::of(settings, network)?;
        let pinned = store
            .pin_money_if_absent(network, &own, &format!("{instance} (first start)"), now_ms)
            .await?;
        if pinned.fingerprint != own.fingerprint {
            return Err(AgreementError::Differs {
                network,
                applied_at: pinned.applied_at,
                applied_by: pinned.applied_by,
                differences: differences(&pinned.settings, &own.json),
            });
        }
    }
    Ok(())
}

/// What `paywatch config apply` did to one network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub network: Network,
    /// Empty when nothing changed.
    pub differences: Vec<String>,
    /// Finality became stricter: the final height fell by this many blocks.
    pub final_height_lowered_by: Option<i64>,
}

/// Pins the configured settings of every enabled network. Where they
/// changed, the network's lease is fenced in the same transaction (its
/// holder writes nothing more and, configured as before, never takes it
/// again); where finality became stricter, the final height falls by as
/// much, so no money counts final that the new rules would not count.
pub async fn apply(
    store: &Store,
    settings: &Settings,
    actor: &str,
    now_ms: i64,
) -> Result<Vec<Applied>, AgreementError> {
    let mut out = Vec::new();
    for network in settings.enabled_networks() {
        let own = MoneySettings::of(settings, network)?;
        let before: Option<PinnedMoney> = store.pinned_money(network).await?;
        let differences = before
            .as_ref()
            .map(|p| differences(&p.settings, &own.json))
            .unwrap_or_default();
        let changed = before
            .as_ref()
            .is_some_and(|p| p.fingerprint != own.fingerprint);
        let lowered_by = before
            .as_ref()
            .and_then(|p| finality_drop(&p.settings, &own.json));
        store
            .apply_money(network, &own, actor, now_ms, changed, lowered_by)
            .await?;
        out.push(Applied {
            network,
            differences,
            final_height_lowered_by: lowered_by,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_changed_key_with_both_values() {
        let old = r#"{"confirmations":2,"finality":"confirmations","tolerance":{}}"#;
        let new = r#"{"confirmations":6,"finality":"confirmations","tolerance":{"BTC":"50 bp"}}"#;
        assert_eq!(
            differences(old, new),
            vec![
                "confirmations: 2 → 6".to_owned(),
                r#"tolerance: {} → {"BTC":"50 bp"}"#.to_owned()
            ]
        );
        assert_eq!(finality_drop(old, new), Some(4));
        assert_eq!(
            finality_drop(new, old),
            None,
            "fewer confirmations lower nothing"
        );
        assert_eq!(
            finality_drop(
                r#"{"finality":"confirmations","confirmations":12,"max_reorg_depth":64}"#,
                r#"{"finality":"finalized","confirmations":12,"max_reorg_depth":64}"#
            ),
            Some(64)
        );
    }
}
