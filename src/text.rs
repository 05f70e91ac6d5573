//! Text people type into paywatch (references, accounts, notes, actors,
//! memos), checked one way wherever it enters, the API and the console
//! alike.
//!
//! Invisible characters are refused, not stripped: a reference with a
//! zero-width space is another reference that looks the same, and a
//! right-to-left override in a note makes support read another text than
//! the one stored. Either would let a caller make one thing look like
//! another in the console, the audit log or the storefront's view.

/// Why a text was refused, worded to follow its field's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextProblem {
    Empty,
    TooLong { max_bytes: usize },
    Control,
    Invisible,
}

impl std::fmt::Display for TextProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TextProblem::Empty => f.write_str("must not be empty"),
            TextProblem::TooLong { max_bytes } => write!(f, "must be at most {max_bytes} bytes"),
            TextProblem::Control => f.write_str("must not hold control characters"),
            TextProblem::Invisible => f.write_str(
                "must not hold invisible formatting characters (zero-width, byte-order mark, \
                 or bidirectional controls)",
            ),
        }
    }
}

/// A one-line name (reference, account, actor): trimmed, non-empty, at
/// most `max_bytes`, no control or formatting characters.
pub(crate) fn label(value: &str, max_bytes: usize) -> Result<&str, TextProblem> {
    checked(value, max_bytes, |c| c.is_control() || is_line_break(c))
}

/// Prose (a note, a memo): as a label, but lines and tabs are allowed.
pub(crate) fn prose(value: &str, max_bytes: usize) -> Result<&str, TextProblem> {
    checked(value, max_bytes, |c| {
        c.is_control() && !matches!(c, '\n' | '\r' | '\t')
    })
}

fn checked(
    value: &str,
    max_bytes: usize,
    is_control: impl Fn(char) -> bool,
) -> Result<&str, TextProblem> {
    let v = value.trim();
    if v.is_empty() {
        return Err(TextProblem::Empty);
    }
    if v.len() > max_bytes {
        return Err(TextProblem::TooLong { max_bytes });
    }
    if v.chars().any(is_control) {
        return Err(TextProblem::Control);
    }
    if v.chars().any(is_format) {
        return Err(TextProblem::Invisible);
    }
    Ok(v)
}

fn is_line_break(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}')
}

/// Unicode's format characters (general category Cf, Unicode 15.1): the
/// standard library has no table for them, and they are few and stable.
fn is_format(c: char) -> bool {
    const CF: &[(u32, u32)] = &[
        (0x00AD, 0x00AD),
        (0x0600, 0x0605),
        (0x061C, 0x061C),
        (0x06DD, 0x06DD),
        (0x070F, 0x070F),
        (0x0890, 0x0891),
        (0x08E2, 0x08E2),
        (0x180E, 0x180E),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x2064),
        (0x2066, 0x206F),
        (0xFEFF, 0xFEFF),
        (0xFFF9, 0xFFFB),
        (0x110BD, 0x110BD),
        (0x110CD, 0x110CD),
        (0x13430, 0x1343F),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0001, 0xE0001),
        (0xE0020, 0xE007F),
    ];
    let c = u32::from(c);
    CF.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_refuse_what_hides_or_reorders_text() {
        assert_eq!(label("  A-1 ", 200), Ok("A-1"));
        assert_eq!(label("Bestellung-Größe-1", 200), Ok("Bestellung-Größe-1"));
        for bad in [
            "A\u{200B}1",
            "\u{202E}1-A",
            "a\u{2066}b",
            "\u{FEFF}x",
            "a\u{AD}b",
        ] {
            assert_eq!(label(bad, 200), Err(TextProblem::Invisible), "{bad:?}");
        }
        assert_eq!(label("a\nb", 200), Err(TextProblem::Control));
        assert_eq!(label("a\u{2028}b", 200), Err(TextProblem::Control));
        assert_eq!(label("   ", 200), Err(TextProblem::Empty));
        assert_eq!(
            label(&"x".repeat(201), 200),
            Err(TextProblem::TooLong { max_bytes: 200 })
        );
    }

    #[test]
    fn prose_keeps_lines_and_tabs_but_not_other_controls() {
        assert_eq!(prose("one\r\ntwo\tthree", 2000), Ok("one\r\ntwo\tthree"));
        assert_eq!(prose("bell\u{7}", 2000), Err(TextProblem::Control));
        assert_eq!(prose("x\u{202E}y", 2000), Err(TextProblem::Invisible));
    }
}
