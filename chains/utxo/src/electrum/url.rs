//! Where the server is: the configured URL as a socket address.

use super::ElectrumError;

/// `tcp://host:port` or `host:port` → `host:port`.
pub(super) fn socket_address(url: &str) -> Result<String, ElectrumError> {
    let bad = |reason: String| ElectrumError::InvalidUrl {
        url: url.to_owned(),
        reason,
    };
    let trimmed = url.trim();
    let rest = match trimmed.split_once("://") {
        None => trimmed,
        Some((scheme, rest)) => match scheme.to_ascii_lowercase().as_str() {
            "tcp" => rest,
            "ssl" | "tls" => {
                return Err(bad(
                    "TLS is not built into paywatch; reach the server over plain tcp:// \
                     (through stunnel or an SSH tunnel when it is not on this host)"
                        .to_owned(),
                ))
            }
            other => {
                return Err(bad(format!(
                    "unknown scheme '{other}://'; expected tcp://host:port or host:port"
                )))
            }
        },
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(bad(
            "no port; expected host:port, e.g. 127.0.0.1:50001".to_owned()
        ));
    };
    if host.is_empty() || host == "[]" {
        return Err(bad(
            "no host; expected host:port, e.g. 127.0.0.1:50001".to_owned()
        ));
    }
    if host.contains(['/', '@', ' ']) {
        return Err(bad(format!("'{host}' is not a host name")));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad(
            "an IPv6 address goes in brackets, e.g. [::1]:50001".to_owned()
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(format!("{host}:{p}")),
        _ => Err(bad(format!(
            "port '{port}' is not a number from 1 to 65535"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            socket_address("tcp://127.0.0.1:50001").unwrap(),
            "127.0.0.1:50001"
        );
        assert_eq!(
            socket_address(" electrum.example:50001 ").unwrap(),
            "electrum.example:50001"
        );
        assert_eq!(socket_address("TCP://[::1]:50001/").unwrap(), "[::1]:50001");
        for (url, needle) in [
            ("ssl://electrum.example:50002", "TLS"),
            ("http://electrum.example:50001", "unknown scheme"),
            ("electrum.example", "no port"),
            (":50001", "no host"),
            ("electrum.example:0", "port '0'"),
            ("electrum.example:port", "port 'port'"),
            ("::1:50001", "brackets"),
        ] {
            let e = socket_address(url).unwrap_err();
            assert!(e.is_fatal(), "{e}");
            assert!(e.to_string().contains(needle), "{url}: {e}");
        }
    }
}
