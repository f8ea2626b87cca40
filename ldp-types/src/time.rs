//! ISO 8601 timestamps. Envelopes keep the sender's exact string (signatures cover it); these helpers parse and
//! format without reading any clock.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::Error;

/// Parses an ISO 8601 / RFC 3339 timestamp such as `2026-03-09T10:00:00Z` or `2026-03-09T10:00:00.123+00:00`.
pub fn parse_timestamp(s: &str) -> Result<OffsetDateTime, Error> {
    OffsetDateTime::parse(s, &Rfc3339).map_err(|_| Error::InvalidTimestamp(s.to_owned()))
}

/// Formats a time as RFC 3339 in UTC, e.g. `2026-03-09T10:00:00Z`.
pub fn format_timestamp(t: OffsetDateTime) -> String {
    let utc = t.to_offset(time::UtcOffset::UTC);
    // Rfc3339 formatting only fails for years outside 0..=9999, which no clock produces; fall back to the epoch form.
    utc.format(&Rfc3339).unwrap_or_else(|_| format!("{}", utc.unix_timestamp()))
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

    #[test]
    fn format_round_trips() {
        let t = parse_timestamp("2026-03-09T10:00:00Z").unwrap();
        assert_eq!(format_timestamp(t), "2026-03-09T10:00:00Z");
    }
}
