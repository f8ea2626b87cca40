//! ISO 8601 timestamps. Envelopes keep the sender's exact string (signatures cover it); these helpers parse and
//! format without reading any clock.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::Error;

/// Parses an ISO 8601 / RFC 3339 timestamp such as `2026-03-09T10:00:00Z` or `2026-03-09T10:00:00.123+00:00`.
pub fn parse_timestamp(s: &str) -> Result<OffsetDateTime, Error> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|_| Error::InvalidTimestamp(s.to_owned()))
}

/// Formats a time as RFC 3339 in UTC, e.g. `2026-03-09T10:00:00Z` or `2026-03-09T10:00:00.25Z`: the same text as
/// `time`'s `Rfc3339` formatting (fractional seconds only when non-zero, without trailing zeros), written directly
/// into one string because every outbound message carries a timestamp.
pub fn format_timestamp(t: OffsetDateTime) -> String {
    let utc = t.to_offset(time::UtcOffset::UTC);
    let year = utc.year();
    if !(0..=9999).contains(&year) {
        // RFC 3339 has four-digit years only; no clock produces these. Fall back to the epoch form.
        return format!("{}", utc.unix_timestamp());
    }
    // `year` is in 0..=9999, so it fits in u16.
    let year = year.unsigned_abs() as u16;
    let mut out = String::with_capacity(30);
    push_digits(&mut out, u32::from(year), 4);
    out.push('-');
    push_digits(&mut out, u32::from(u8::from(utc.month())), 2);
    out.push('-');
    push_digits(&mut out, u32::from(utc.day()), 2);
    out.push('T');
    push_digits(&mut out, u32::from(utc.hour()), 2);
    out.push(':');
    push_digits(&mut out, u32::from(utc.minute()), 2);
    out.push(':');
    push_digits(&mut out, u32::from(utc.second()), 2);
    let mut nanos = utc.nanosecond();
    if nanos != 0 {
        let mut width = 9;
        while nanos.is_multiple_of(10) {
            nanos /= 10;
            width -= 1;
        }
        out.push('.');
        push_digits(&mut out, nanos, width);
    }
    out.push('Z');
    out
}

/// Appends the last `width` decimal digits of `n`, zero-padded.
fn push_digits(out: &mut String, n: u32, width: u32) {
    for i in (0..width).rev() {
        let digit = (n / 10u32.pow(i)) % 10;
        out.push(char::from(b'0' + digit as u8));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_python_and_rfc_forms() {
        assert!(parse_timestamp("2026-03-09T10:00:00Z").is_ok());
        assert!(parse_timestamp("2026-03-09T10:00:00.123456+00:00").is_ok());
        assert!(matches!(parse_timestamp("yesterday"), Err(Error::InvalidTimestamp(_))));
    }

    proptest::proptest! {
        #[test]
        fn format_matches_the_time_crate(secs in -62_167_219_200i64..253_402_300_800, nanos in 0u32..1_000_000_000,
                                         round in 0usize..4, offset_secs in -86_399i32..86_400) {
            // Whole seconds, milliseconds, microseconds and full nanoseconds all occur in practice.
            let nanos = nanos - nanos % [1_000_000_000, 1_000_000, 1_000, 1][round];
            let utc = OffsetDateTime::from_unix_timestamp(secs).unwrap().replace_nanosecond(nanos).unwrap();
            let expected = utc.format(&Rfc3339).unwrap();
            proptest::prop_assert_eq!(format_timestamp(utc), expected.clone());
            // Any offset is written in UTC.
            let offset = time::UtcOffset::from_whole_seconds(offset_secs).unwrap();
            proptest::prop_assert_eq!(format_timestamp(utc.to_offset(offset)), expected);
        }
    }

    #[test]
    fn format_round_trips() {
        let t = parse_timestamp("2026-03-09T10:00:00Z").unwrap();
        assert_eq!(format_timestamp(t), "2026-03-09T10:00:00Z");
    }
}
