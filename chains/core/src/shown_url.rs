//! A configured URL as logs, errors, the API and the console may show it.
//!
//! Hosted nodes and price APIs put their key in the URL (`…/v3/KEY`,
//! `?api-key=KEY`, `user:KEY@`), and an error that carries the whole URL
//! carries the key into logs, `last_error`, `/v1/watchers` and the
//! console. Only the scheme, host and port are shown: they say which
//! endpoint failed, and nothing a key can hide in.

/// `scheme://host[:port]` of `url`, without credentials, path or query.
/// What is not shaped like a host (a key pasted where a URL belongs) is
/// shown as `<redacted>`, and nothing as nothing.
pub fn shown_url(url: &str) -> String {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_like = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']'));
    match scheme {
        _ if url.is_empty() => String::new(),
        _ if !host_like => "<redacted>".to_owned(),
        Some(scheme) => format!("{scheme}://{host}"),
        None => host.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scheme_host_and_port_are_shown() {
        for (url, shown) in [
            (
                "https://user:pw@eth-mainnet.example.com/v2/SECRETKEY?x=1",
                "https://eth-mainnet.example.com",
            ),
            ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
            ("http://127.0.0.1:9/wallet/SECRET", "http://127.0.0.1:9"),
            ("http://127.0.0.1:9/?api-key=SECRET", "http://127.0.0.1:9"),
            ("tcp://127.0.0.1:50001", "tcp://127.0.0.1:50001"),
            ("host.example:80/x?k=SECRET", "host.example:80"),
            ("https://[::1]:443/k", "https://[::1]:443"),
            ("", ""),
            ("not a url with a key", "<redacted>"),
            ("https://user:pw@host/x", "https://host"),
            ("https://my key/x", "<redacted>"),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }
}
