//! `paywatch config check`: the configuration paywatch would run with
//! (defaults, then the file, then `PAYWATCH__…` variables), one key per
//! line, with every secret redacted, and every mistake in it at once, so a
//! new setup is put right in one pass instead of one refusal at a time.

use serde_json::Value;

/// What `paywatch config check` says of a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigReport {
    /// `key = value` lines, sorted, secrets redacted; `None` when the
    /// configuration could not even be read.
    pub effective: Option<String>,
    /// Each mistake, naming its key; empty when there is none.
    pub problems: Vec<String>,
}

/// The merged configuration as `key = value` lines, secrets redacted.
pub(crate) fn effective(config: &config::Config) -> Option<String> {
    let value: Value = config.clone().try_deserialize().ok()?;
    let mut lines = Vec::new();
    flatten("", &value, &mut lines);
    lines.sort();
    Some(lines.join("\n"))
}

fn flatten(path: &str, value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, v) in map {
                let key = if key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    key.clone()
                } else {
                    format!("\"{key}\"")
                };
                let child = if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                };
                flatten(&child, v, out);
            }
        }
        leaf => out.push(format!("{path} = {}", shown(path, leaf))),
    }
}

/// A leaf as it may be shown: credentials never, a URL only as far as its
/// host and port (keys hide in paths and queries), an account key only by
/// its first characters (it derives every address, so it reveals them).
fn shown(path: &str, value: &Value) -> String {
    let last = path.rsplit('.').next().unwrap_or(path);
    let secret = matches!(last, "password" | "secret")
        || path.contains(".metadata.")
        || path.starts_with("api.tokens.");
    match value {
        Value::Null => "(unset)".to_owned(),
        _ if secret => "\"<redacted>\"".to_owned(),
        // `rates.exchanges.urls.<provider>` too: a proxy's key hides there as well.
        Value::String(s) if last.ends_with("url") || path.contains(".urls.") => {
            format!("\"{}\"", url_host(s))
        }
        Value::String(s) if last == "account_key" && !s.is_empty() => {
            format!("\"{}…\"", s.chars().take(4).collect::<String>())
        }
        Value::Array(items) if items.iter().all(|i| !i.is_object()) => format!(
            "[{}]",
            items
                .iter()
                .map(|i| shown(path, i))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The one shown form of a URL (`paywatch_core::shown_url`), except a
/// SQLite file's path, shown whole: it holds no credential and says which
/// file.
fn url_host(url: &str) -> String {
    match url.trim().strip_prefix("sqlite://") {
        Some(path) => format!("sqlite://{}", path.split('?').next().unwrap_or("")),
        None => paywatch_core::shown_url(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_to_its_host_and_port_only() {
        assert_eq!(
            url_host("https://user:pw@rpc.example:8545/v3/KEY?apikey=K"),
            "https://rpc.example:8545"
        );
        assert_eq!(url_host("http://127.0.0.1:8332"), "http://127.0.0.1:8332");
        assert_eq!(
            url_host("postgres://paywatch:pw@db:5432/paywatch"),
            "postgres://db:5432"
        );
        assert_eq!(
            url_host("sqlite://data/paywatch.db?mode=rwc"),
            "sqlite://data/paywatch.db"
        );
        assert_eq!(url_host("not a url with a key"), "<redacted>");
    }

    #[test]
    fn secrets_are_redacted_wherever_they_sit() {
        let value = serde_json::json!({
            "webhooks": {"secret": "s3cret", "url": "https://shop/hooks?token=T"},
            "networks": {"tron": {"rpc": {"metadata": {"TRON-PRO-API-KEY": "K"}}},
                         "bitcoin": {"rpc": {"password": "P"}, "account_key": "zpub6rABCDEF"}},
            "api": {"tokens": {"storefront": ["shop:hash"]}},
        });
        let mut lines = Vec::new();
        flatten("", &value, &mut lines);
        let text = lines.join("\n");
        for secret in [
            "s3cret",
            "token=T",
            "\"K\"",
            "\"P\"",
            "shop:hash",
            "zpub6rABCDEF",
        ] {
            assert!(!text.contains(secret), "{secret} shown in:\n{text}");
        }
        assert!(
            text.contains("networks.bitcoin.account_key = \"zpub…\""),
            "{text}"
        );
        assert!(
            text.contains("networks.tron.rpc.metadata.\"TRON-PRO-API-KEY\" = \"<redacted>\""),
            "{text}"
        );
    }
}
