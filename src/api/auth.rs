//! Bearer tokens per role, configured as SHA-256 hashes (each with a name,
//! `"<name>:<hash>"`, so the audit log can say whose token acted) and
//! compared in constant time.

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
    #[error(
        "api.tokens.{role}: entry {index} names its token '{name}'; a name is 1 to 64 letters, \
         digits, '.', '_' or '-'"
    )]
    BadName {
        role: String,
        index: usize,
        name: String,
    },
    #[error("api.tokens: two tokens are named '{0}'; each needs its own name")]
    SharedName(String),
    #[error("no randomness for a token: {0}")]
    NoRandomness(String),
    /// `api.trusted_proxies` holds an entry that is no address or CIDR:
    /// read with the tokens, as the other half of who a caller is.
    #[error("{0}")]
    TrustedProxies(String),
}

/// A token made by [`TokenTable::new_token`].
#[derive(Debug, Clone)]
pub struct NewToken {
    pub token: String,
    pub hash: String,
}

/// Who is calling: the role, and the configured name of the token used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub role: Role,
    pub token_name: String,
}

#[derive(Debug, Clone)]
struct Entry {
    hash: [u8; 32],
    role: Role,
    name: String,
}

/// The configured token hashes.
#[derive(Debug, Clone, Default)]
pub struct TokenTable {
    entries: Vec<Entry>,
}

/// A token name as the audit log and the console show it.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl TokenTable {
    /// Reads `api.tokens`: per role, entries `"<name>:<hash>"` or a bare
    /// `"<hash>"`, which is named `<role>-<n>` after its place in the list.
    pub fn from_settings(api: &ApiSettings) -> Result<TokenTable, TokenConfigError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (role_name, list) in &api.tokens {
            let role = Role::ALL
                .into_iter()
                .find(|r| r.as_str() == role_name)
                .ok_or_else(|| TokenConfigError::UnknownRole(role_name.clone()))?;
            for (index, text) in list.iter().enumerate() {
                let not_hash = || TokenConfigError::NotAHash {
                    role: role_name.clone(),
                    index,
                };
                let (name, hash_text) = match text.trim().rsplit_once(':') {
                    Some((name, hash)) => (name.trim().to_owned(), hash),
                    None => (format!("{role_name}-{}", index + 1), text.trim()),
                };
                if !valid_name(&name) {
                    return Err(TokenConfigError::BadName {
                        role: role_name.clone(),
                        index,
                        name,
                    });
                }
                let bytes = hex::decode(hash_text.trim()).map_err(|_| not_hash())?;
                let hash: [u8; 32] = bytes.try_into().map_err(|_| not_hash())?;
                if let Some(other) = entries.iter().find(|e| e.hash == hash && e.role != role) {
                    return Err(TokenConfigError::SharedHash(
                        other.role.as_str(),
                        role.as_str(),
                    ));
                }
                if entries.iter().any(|e| e.name == name) {
                    return Err(TokenConfigError::SharedName(name));
                }
                entries.push(Entry { hash, role, name });
            }
        }
        Ok(TokenTable { entries })
    }

    /// The caller whose configured hash is `hash`, if it is still configured:
    /// a console session re-checks its token on every request this way.
    pub(crate) fn configured(&self, hash: &[u8; 32]) -> Option<Caller> {
        let mut found = None;
        for e in &self.entries {
            if constant_time_eq(&e.hash, hash) {
                found = Some(Caller {
                    role: e.role,
                    token_name: e.name.clone(),
                });
            }
        }
        found
    }

    /// A new token for `role` named `name`: 256 random bits, in hex after
    /// `pw_` (so a leaked one is easy to search for), and its hash.
    pub fn new_token(role: &str, name: &str) -> Result<NewToken, TokenConfigError> {
        if !Role::ALL.iter().any(|r| r.as_str() == role) {
            return Err(TokenConfigError::UnknownRole(role.to_owned()));
        }
        if !valid_name(name) {
            return Err(TokenConfigError::BadName {
                role: role.to_owned(),
                index: 0,
                name: name.to_owned(),
            });
        }
        let mut bits = [0u8; 32];
        getrandom::getrandom(&mut bits)
            .map_err(|e| TokenConfigError::NoRandomness(e.to_string()))?;
        let token = format!("pw_{}", hex::encode(bits));
        let hash = TokenTable::hash_token(&token);
        Ok(NewToken { token, hash })
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
        self.caller(headers, allowed, route).map(|c| c.role)
    }

    /// As [`TokenTable::authorize`], with the token's name.
    pub(crate) fn caller(
        &self,
        headers: &HeaderMap,
        allowed: &[Role],
        route: &str,
    ) -> Result<Caller, ApiError> {
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
    ) -> Result<Caller, ApiError> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let Some(caller) = self.configured(&presented) else {
            // The token is never logged; its hash's first bytes would help
            // an attacker nothing and an operator little, so neither is.
            warn!(route, "refused: unknown token");
            return Err(ApiError::unauthorized());
        };
        let role = caller.role;
        if !allowed.contains(&role) {
            warn!(
                route,
                role = role.as_str(),
                token = caller.token_name,
                "refused: role not allowed here"
            );
            return Err(ApiError::forbidden(role));
        }
        Ok(caller)
    }

    /// The SHA-256 of `token`, as [`TokenTable::configured`] takes it.
    pub(crate) fn digest(token: &str) -> [u8; 32] {
        Sha256::digest(token.as_bytes()).into()
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
        TokenTable::from_settings(&api_settings(map))
    }

    fn api_settings(tokens: BTreeMap<String, Vec<String>>) -> ApiSettings {
        ApiSettings {
            listen: String::new(),
            max_body_bytes: 1024,
            max_connections: 1,
            max_connections_per_client: 1,
            header_read_timeout_secs: 1,
            request_timeout_secs: 1,
            behind_tls: false,
            auth_failures_per_minute: 20,
            event_stream_secs: 1,
            max_event_streams: 1,
            max_streams_per_page: 1,
            max_streams_per_client: 1,
            trusted_proxies: Vec::new(),
            trusted_proxy_header: "X-Forwarded-For".into(),
            tokens,
        }
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
        let e = TokenTable::from_settings(&api_settings(map)).unwrap_err();
        assert!(e.to_string().contains("api.tokens.admin"), "{e}");
        let mut map = BTreeMap::new();
        map.insert("operator".to_owned(), vec!["plain-token".to_owned()]);
        let e = TokenTable::from_settings(&api_settings(map)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "api.tokens.operator: entry 0 is not a SHA-256 hash in hex (64 hex digits)"
        );
        let e = table(&[("operator", "same"), ("support", "same")]).unwrap_err();
        assert!(matches!(e, TokenConfigError::SharedHash(..)), "{e}");
    }

    #[test]
    fn a_token_has_a_name_given_or_made_from_its_role() {
        let mut map = BTreeMap::new();
        map.insert(
            "support".to_owned(),
            vec![
                TokenTable::hash_token("first"),
                format!("help-desk-ana:{}", TokenTable::hash_token("second")),
            ],
        );
        let t = TokenTable::from_settings(&api_settings(map.clone())).unwrap();
        let name = |token| {
            t.caller(&bearer(token), &Role::ALL, "t")
                .unwrap()
                .token_name
        };
        assert_eq!(name("first"), "support-1");
        assert_eq!(name("second"), "help-desk-ana");
        map.insert(
            "operator".to_owned(),
            vec![format!("help-desk-ana:{}", TokenTable::hash_token("third"))],
        );
        let e = TokenTable::from_settings(&api_settings(map.clone())).unwrap_err();
        assert!(matches!(e, TokenConfigError::SharedName(_)), "{e}");
        map.insert(
            "operator".to_owned(),
            vec![format!("ana smith:{}", TokenTable::hash_token("third"))],
        );
        let e = TokenTable::from_settings(&api_settings(map)).unwrap_err();
        assert!(e.to_string().contains("api.tokens.operator"), "{e}");
    }
}
