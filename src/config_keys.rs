//! Keys in the configuration that no setting reads. Ignoring one silently
//! is how `sourc = "node"` left a network on the dev chain: a key nobody
//! reads is a mistake, refused at start with where it came from and the
//! known key it most likely meant.

use std::collections::BTreeSet;

/// What to say about each unknown key (dotted paths, as serde_ignored
/// gives them), or `None` when there are none.
pub(crate) fn describe_unknown(
    config: &config::Config,
    file: Option<&str>,
    unknown: &[String],
) -> Option<String> {
    if unknown.is_empty() {
        return None;
    }
    // Read only when there is a mistake to explain. They loaded before
    // the file did, so they cannot fail here; without them, no hint.
    let defaults = config::Config::builder()
        .add_source(config::File::from_str(
            crate::settings::DEFAULT_TOML,
            config::FileFormat::Toml,
        ))
        .build()
        .unwrap_or_default();
    let lines: Vec<String> = unknown
        .iter()
        .map(|path| {
            let (parent, leaf) = path.rsplit_once('.').unwrap_or(("", path.as_str()));
            let origin = origin_of(config, file, parent, leaf);
            let hint = nearest(leaf, &known_siblings(&defaults, parent))
                .map(|k| format!(": did you mean `{}`?", join(parent, &k)))
                .unwrap_or_default();
            format!("\n  `{path}` {origin}{hint}")
        })
        .collect();
    Some(format!(
        "{} unknown {} (paywatch reads no such setting; remove or correct {}):{}",
        unknown.len(),
        if unknown.len() == 1 { "key" } else { "keys" },
        if unknown.len() == 1 { "it" } else { "each" },
        lines.concat()
    ))
}

fn join(parent: &str, leaf: &str) -> String {
    if parent.is_empty() {
        leaf.to_owned()
    } else {
        format!("{parent}.{leaf}")
    }
}

/// The file (or the environment) the key was set in: the file as it was
/// given, since config names it relative to the working directory.
fn origin_of(config: &config::Config, file: Option<&str>, parent: &str, leaf: &str) -> String {
    let origin = if parent.is_empty() {
        None
    } else {
        config
            .get_table(parent)
            .ok()
            .and_then(|t| t.get(leaf).and_then(|v| v.origin().map(str::to_owned)))
    };
    match origin {
        // config names the environment so as a value's origin.
        Some(o) if o == "the environment" => {
            format!("from the environment: PAYWATCH__{}", env_name(parent, leaf))
        }
        Some(other) => format!("in {}", file.unwrap_or(&other)),
        None => "in the configuration".to_owned(),
    }
}

fn env_name(parent: &str, leaf: &str) -> String {
    join(parent, leaf).replace('.', "__").to_uppercase()
}

/// The keys the built-in defaults set beside the unknown one. Map entries
/// (a network's name) are read as their kind: every network has the same keys.
fn known_siblings(defaults: &config::Config, parent: &str) -> BTreeSet<String> {
    let mut keys: BTreeSet<String> = defaults
        .get_table(parent)
        .map(|t| t.into_keys().collect())
        .unwrap_or_default();
    if let Some(rest) = parent.strip_prefix("networks.") {
        if let Ok(networks) = defaults.get_table("networks") {
            let tail = rest.split_once('.').map(|(_, t)| t);
            for name in networks.keys() {
                let path = match tail {
                    Some(t) => format!("networks.{name}.{t}"),
                    None => format!("networks.{name}"),
                };
                if let Ok(t) = defaults.get_table(&path) {
                    keys.extend(t.into_keys());
                }
            }
        }
    }
    keys
}

/// The known key closest to `key` by edit distance, when close enough to
/// be a slip (at most a third of its letters, and at most 3).
fn nearest(key: &str, known: &BTreeSet<String>) -> Option<String> {
    let limit = (key.chars().count() / 3).clamp(1, 3);
    known
        .iter()
        .map(|k| (edit_distance(key, k), k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k.clone())
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slip_finds_the_key_meant_and_a_stranger_finds_none() {
        let known: BTreeSet<String> = ["source", "enabled", "confirmations", "mempool"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        assert_eq!(nearest("sourc", &known).as_deref(), Some("source"));
        assert_eq!(
            nearest("confirmatons", &known).as_deref(),
            Some("confirmations")
        );
        assert_eq!(nearest("mempol", &known).as_deref(), Some("mempool"));
        assert_eq!(nearest("colour", &known), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
