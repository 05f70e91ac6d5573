//! Times as a person reads them: UTC timestamps and short ages, from the
//! Unix milliseconds the store keeps. Integer arithmetic only (no float
//! touches a time here), and no time-zone guessing: operators on different
//! continents compare the same UTC text.

/// `2023-11-14 22:13:20 UTC`.
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `utc` of an optional time, or a dash.
pub(crate) fn utc_or_dash(ms: Option<i64>) -> String {
    ms.map_or_else(|| "—".to_owned(), utc)
}

/// A duration, coarse: `45s`, `12m 05s`, `3h 07m`, `2d 4h`.
pub(crate) fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Year, month, day of a day count from 1970-01-01 (proleptic Gregorian),
/// after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(-1000), "1969-12-31 23:59:59 UTC");
        assert_eq!(utc_or_dash(None), "—");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(45_999), "45s");
        assert_eq!(age(725_000), "12m 05s");
        assert_eq!(age(3 * 3_600_000 + 7 * 60_000), "3h 07m");
        assert_eq!(age(2 * 86_400_000 + 4 * 3_600_000 + 1), "2d 4h");
    }
}
