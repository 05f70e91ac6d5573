//! Bearer tokens per role, configured as SHA-256 hashes and compared in
//! constant time.

use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use sha2::{Digest, Sha256};
use tracing::warn;

use super::error::ApiError;
use crate::settings::ApiSettings;

/// Who is calling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Storefront,
    Operator,
    Support,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Storefront, Role::Operator, Role::Support];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Storefront => "storefront",
            Role::Operator => "operator",
            Role::Support => "support",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenConfigError {
    #[error("api.tokens.{0}: no such role (storefront, operator, support)")]
    UnknownRole(String),
    #[error("api.tokens.{role}: entry {index} is not a SHA-256 hash in hex (64 hex digits)")]
    NotAHash { role: String, index: usize },
    #[error("api.tokens: one hash is configured for both {0} and {1}")]
    SharedHash(&'static str, &'static str),
}

/// The configured token hashes.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    hashes: Vec<([u8; 32], Role)>,
}

impl TokenTable {
    pub fn from_settings(api: &ApiSettings) -> Result<TokenTable, TokenConfigError> {
        let mut hashes: Vec<([u8; 32], Role)> = Vec::new();
        for (name, list) in &api.tokens {
            let role = Role::ALL
                .into_iter()
                .find(|r| r.as_str() == name)
                .ok_or_else(|| TokenConfigError::UnknownRole(name.clone()))?;
            for (index, text) in list.iter().enumerate() {
                let not_hash = || TokenConfigError::NotAHash {
                    role: name.clone(),
                    index,
                };
                let bytes = hex::decode(text.trim()).map_err(|_| not_hash())?;
                let hash: [u8; 32] = bytes.try_into().map_err(|_| not_hash())?;
                if let Some((_, other)) = hashes.iter().find(|(h, r)| *h == hash && *r != role) {
                    return Err(TokenConfigError::SharedHash(other.as_str(), role.as_str()));
                }
                hashes.push((hash, role));
            }
        }
        Ok(TokenTable { hashes })
    }

    /// The hex SHA-256 of a token, as the configuration holds it.
    pub fn hash_token(token: &str) -> String {
        hex::encode(Sha256::digest(token.as_bytes()))
    }

    /// The role of the bearer token in `headers`, if it is one of
    /// `allowed`. Every configured hash is compared, in constant time, so
    /// the answer's timing says nothing about which bytes matched.
    pub(crate) fn authorize(
        &self,
        headers: &HeaderMap,
        allowed: &[Role],
        route: &str,
    ) -> Result<Role, ApiError> {
        let token = headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            warn!(route, "refused: no bearer token");
            return Err(ApiError::unauthorized());
        };
        self.authorize_token(token, allowed, route)
    }

    /// The role of `token`, if it is one of `allowed`: the same check for a
    /// bearer header and the console's cookie, so neither can drift.
    pub(crate) fn authorize_token(
        &self,
        token: &str,
        allowed: &[Role],
        route: &str,
    ) -> Result<Role, ApiError> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut role = None;
        for (hash, r) in &self.hashes {
            if constant_time_eq(hash, &presented) {
                role = Some(*r);
            }
        }
        let Some(role) = role else {
            // The token is never logged; its hash's first bytes would help
            // an attacker nothing and an operator little, so neither is.
            warn!(route, "refused: unknown token");
            return Err(ApiError::unauthorized());
        };
        if !allowed.contains(&role) {
            warn!(
                route,
                role = role.as_str(),
                "refused: role not allowed here"
            );
            return Err(ApiError::forbidden(role));
        }
        Ok(role)
    }
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn table(tokens: &[(&str, &str)]) -> Result<TokenTable, TokenConfigError> {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (role, token) in tokens {
            map.entry((*role).to_owned())
                .or_default()
                .push(TokenTable::hash_token(token));
        }
        TokenTable::from_settings(&ApiSettings {
            listen: String::new(),
            max_body_bytes: 1024,
            max_connections: 1,
            max_connections_per_client: 1,
            header_read_timeout_secs: 1,
            request_timeout_secs: 1,
            tokens: map,
        })
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
        h
    }

    #[test]
    fn a_token_is_its_role_and_nothing_else() {
        let t = table(&[("storefront", "shop-secret"), ("support", "help-secret")]).unwrap();
        let shop = t.authorize(&bearer("shop-secret"), &[Role::Storefront], "t");
        assert_eq!(shop.unwrap(), Role::Storefront);
        let e = t
            .authorize(&bearer("help-secret"), &[Role::Storefront], "t")
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 403);
        for bad in [bearer("shop-secre"), bearer(""), HeaderMap::new()] {
            let e = t.authorize(&bad, &Role::ALL, "t").unwrap_err();
            assert_eq!(e.status.as_u16(), 401);
        }
    }

    #[test]
    fn bad_configuration_names_the_key() {
        let mut map = BTreeMap::new();
        map.insert("admin".to_owned(), vec![TokenTable::hash_token("x")]);
        let e = TokenTable::from_settings(&ApiSettings {
            listen: String::new(),
            max_body_bytes: 1,
            max_connections: 1,
            max_connections_per_client: 1,
            header_read_timeout_secs: 1,
            request_timeout_secs: 1,
            tokens: map,
        })
        .unwrap_err();
        assert!(e.to_string().contains("api.tokens.admin"), "{e}");
        let mut map = BTreeMap::new();
        map.insert("operator".to_owned(), vec!["plain-token".to_owned()]);
        let e = TokenTable::from_settings(&ApiSettings {
            listen: String::new(),
            max_body_bytes: 1,
            max_connections: 1,
            max_connections_per_client: 1,
            header_read_timeout_secs: 1,
            request_timeout_secs: 1,
            tokens: map,
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "api.tokens.operator: entry 0 is not a SHA-256 hash in hex (64 hex digits)"
        );
        let e = table(&[("operator", "same"), ("support", "same")]).unwrap_err();
        assert!(matches!(e, TokenConfigError::SharedHash(..)), "{e}");
    }
}
