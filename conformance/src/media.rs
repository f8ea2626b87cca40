//! Media types as RFC 9110 compares them: the type and subtype are case-insensitive (8.3.1), parameters follow a `;`
//! with optional whitespace around it (5.6.6), and a parameter never changes which media type it is.

/// Whether a `Content-Type` value names the media type `essence` (`type/subtype`, lower case), whatever its case
/// and parameters: `Application/JSON; Charset=UTF-8` is `application/json`; `application/jsonx` is not.
pub(crate) fn is_media_type(content_type: Option<&str>, essence: &str) -> bool {
    content_type.is_some_and(|ct| {
        let name = ct.split(';').next().unwrap_or_default().trim_matches([' ', '\t']);
        name.eq_ignore_ascii_case(essence)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_parameters_do_not_change_the_media_type() {
        for ct in [
            "application/json",
            "Application/JSON",
            "APPLICATION/JSON;charset=utf-8",
            "Application/JSON; Charset=UTF-8",
            " application/json ; charset=\"utf-8\"",
            "application/json\t;q=1",
        ] {
            assert!(is_media_type(Some(ct), "application/json"), "{ct}");
        }
    }

    #[test]
    fn other_media_types_are_not_json() {
        for ct in ["application/jsonx", "text/json", "application/problem+json", "application", "", "json"] {
            assert!(!is_media_type(Some(ct), "application/json"), "{ct}");
        }
        assert!(!is_media_type(None, "application/json"));
        assert!(is_media_type(Some("Text/Event-Stream; charset=utf-8"), "text/event-stream"));
    }
}
