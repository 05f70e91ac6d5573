use std::fmt;
use std::str::FromStr;

/// What an intent pays for: an order, marked paid once; or a balance
/// top-up, credited to the account's ledger once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentKind {
    Order,
    Topup,
}

impl IntentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IntentKind::Order => "order",
            IntentKind::Topup => "topup",
        }
    }
}

impl fmt::Display for IntentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown intent kind '{0}' (expected order or topup)")]
pub struct UnknownKind(String);

impl FromStr for IntentKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "order" => Ok(IntentKind::Order),
            "topup" => Ok(IntentKind::Topup),
            other => Err(UnknownKind(other.to_owned())),
        }
    }
}
