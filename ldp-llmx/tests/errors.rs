//! One test per kind of malformed input: the error kind, its line and column, and its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_llmx::{LlmxError, ParseErrorKind, Parser, Position, parse};

/// Parses `text`, expects failure, and returns (line, column, kind, message).
fn fail(text: &str) -> (u32, u32, ParseErrorKind, String) {
    match parse(text) {
        Ok(m) => panic!("{text:?} parsed: {m:?}"),
        Err(e @ LlmxError::Parse { .. }) => {
            let Position { line, column } = e.position().unwrap();
            (line, column, e.parse_kind().unwrap().clone(), e.to_string())
        }
        Err(other) => panic!("not a parse error: {other}"),
    }
}

#[test]
fn missing_required_field_names_the_field_and_block() {
    let (l, c, k, msg) = fail("HEADER:{f:A,t:B,s:1}\n  REQ:{o:\"x\"}");
    assert_eq!((l, c), (2, 3));
    assert_eq!(k, ParseErrorKind::MissingField { block: "REQ", field: "pr" });
    assert_eq!(msg, "2:3: missing required field 'pr' in REQ");
    for (text, block, field) in [
        ("HEADER:{t:B,s:1}\nRES:{o:A}", "HEADER", "f"),
        ("HEADER:{f:A,s:1}\nRES:{o:A}", "HEADER", "t"),
        ("HEADER:{f:A,t:B}\nRES:{o:A}", "HEADER", "s"),
        ("HEADER:{f:A,t:B,s:1}\nCTX:{f:[]}", "CTX", "p"),
        ("HEADER:{f:A,t:B,s:1}\nACT:{tgt:x}", "ACT", "op"),
        ("HEADER:{f:A,t:B,s:1}\nACT:{op:read}", "ACT", "tgt"),
        ("HEADER:{f:A,t:B,s:1}\nOBS:{c:{}}", "OBS", "s"),
        ("HEADER:{f:A,t:B,s:1}\nOBS:{ai:A1,s:OK}", "OBS", "c"),
        ("HEADER:{f:A,t:B,s:1}\nBLK:{w:x}", "BLK", "a"),
        ("HEADER:{f:A,t:B,s:1}\nASK:{o:[]}", "ASK", "q"),
        ("HEADER:{f:A,t:B,s:1}\nEND:{n:x}", "END", "del"),
        ("HEADER:{f:A,t:B,s:1}\nRES:{msg:x}", "RES", "o"),
        ("HEADER:{f:A,t:B,s:1}\nPLAN:[(i:1,t:x)]", "PLAN", "s"),
    ] {
        assert_eq!(fail(text).2, ParseErrorKind::MissingField { block, field }, "{text}");
    }
}

#[test]
fn invalid_field_values_point_at_the_value() {
    let (l, c, k, _) = fail("HEADER:{f:A,t:B,s:1}\nREQ:{o:x,pr:9}");
    assert_eq!((l, c), (2, 13));
    assert!(matches!(k, ParseErrorKind::InvalidField { block: "REQ", field: "pr", .. }));
    let cases = [
        ("HEADER:{f:A,t:B,s:-1}\nRES:{o:A}", "HEADER", "s"),
        ("HEADER:{f:A,t:B,s:1.5}\nRES:{o:A}", "HEADER", "s"),
        ("HEADER:{f:1,t:B,s:1}\nRES:{o:A}", "HEADER", "f"),
        ("HEADER:{f:A,t:B,s:1}\nPLAN:[(i:1,t:x,s:Q)]", "PLAN", "s"),
        ("HEADER:{f:A,t:B,s:1}\nPLAN:[(i:1.5,t:x,s:P)]", "PLAN", "i"),
        ("HEADER:{f:A,t:B,s:1}\nPLAN:[1]", "PLAN", "step"),
        ("HEADER:{f:A,t:B,s:1}\nOBS:{s:MAYBE,c:{}}", "OBS", "s"),
        ("HEADER:{f:A,t:B,s:1}\nACT:{op:delete,tgt:x}", "ACT", "op"),
        ("HEADER:{f:A,t:B,s:1}\nBLK:{w:x,a:[1,2]}", "BLK", "a"),
        ("HEADER:{f:A,t:B,s:1}\nBLK:{w:x,a:[],esc:yes}", "BLK", "esc"),
        ("HEADER:{f:A,t:B,s:1}\nCTX:{p:x,st:[1]}", "CTX", "st"),
    ];
    for (text, block, field) in cases {
        let k = fail(text).2;
        assert!(
            matches!(&k, ParseErrorKind::InvalidField { block: b, field: f, .. } if *b == block && *f == field),
            "{text}: {k:?}"
        );
    }
}

#[test]
fn unknown_non_custom_field_is_rejected() {
    let (l, c, k, msg) = fail("HEADER:{f:A,t:B,s:1}\nREQ:{o:x,pr:1,team:y}");
    assert_eq!((l, c), (2, 20));
    assert_eq!(k, ParseErrorKind::UnknownField { block: "REQ", field: "team".into() });
    assert!(msg.contains("x_ prefix"), "{msg}");
}

#[test]
fn duplicate_field() {
    let (l, c, k, _) = fail("HEADER:{f:A,t:B,f:C,s:1}\nRES:{o:A}");
    assert_eq!((l, c), (1, 17));
    assert_eq!(k, ParseErrorKind::DuplicateField { field: "f".into() });
    // Large objects switch to a set; duplicates are still found.
    let many: String = (0..40).map(|i| format!("k{i}:1,")).collect();
    let k = fail(&format!("HEADER:{{f:A,t:B,s:1}}\nX_A:{{{many}k7:2}}")).2;
    assert_eq!(k, ParseErrorKind::DuplicateField { field: "k7".into() });
}

#[test]
fn missing_header_and_empty_message() {
    assert_eq!(fail("REQ:{o:x,pr:1}").2, ParseErrorKind::MissingHeader);
    assert_eq!(fail("").2, ParseErrorKind::MissingHeader);
    assert_eq!(fail("HEADERS:{f:A}").2, ParseErrorKind::MissingHeader);
}

/// Appendix A: `message = header , { block }` (zero or more blocks), and section 3.1's examples are HEADERs alone.
#[test]
fn header_only_message_is_accepted() {
    let m = ldp_llmx::parse("HEADER:{f:A,t:B,s:1}\n").unwrap();
    assert!(m.blocks.is_empty());
    let all = ldp_llmx::parse_all("HEADER:{f:Claude,t:Gemini,s:1}\nHEADER:{f:Orchestrator,t:ALL,s:42,b:B1}\n").unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].header.batch.as_deref(), Some("B1"));
}

#[test]
fn second_header_where_one_message_expected() {
    let (l, c, k, _) = fail("HEADER:{f:A,t:B,s:1}\nRES:{o:A}\nHEADER:{f:B,t:A,s:2}\nRES:{o:B}");
    assert_eq!(k, ParseErrorKind::ExtraHeader);
    assert_eq!((l, c), (3, 1));
    assert_eq!(
        ldp_llmx::parse_all("HEADER:{f:A,t:B,s:1}\nRES:{o:A}\nHEADER:{f:B,t:A,s:2}\nRES:{o:B}").unwrap().len(),
        2
    );
}

#[test]
fn syntax_errors_say_what_was_expected() {
    let cases: &[(&str, (u32, u32), &str)] = &[
        ("HEADER:{f:A,t:B,s:1}\nREQ:{o:x pr:1}", (2, 10), "expected ',' or '}', found \"pr\""),
        ("HEADER:{f:A,t:B,s:1}\nREQ{o:x}", (2, 4), "expected ':' after the block type, found \"{\""),
        ("HEADER:{f:A,t:B,s:1}\nREQ:o", (2, 5), "expected '{' or '[' after the block type, found \"o\""),
        ("HEADER:{f:A,t:B,s:1}\nREQ:{o:x,}", (2, 10), "expected a field name, found \"}\""),
        ("HEADER:{f:A,t:B,s:1}\nREQ:{o x}", (2, 8), "expected ':' after the field name, found \"x\""),
        ("HEADER:{f:A,t:B,s:1}\nREQ:{o:}", (2, 8), "expected a value"),
        ("HEADER:{f:A,t:B,s:1}\nREQ:{o:\"x", (2, 10), "expected '\"' to close the string, found end of input"),
        ("HEADER:{f:A,t:B,s:1}\nX_A:[1,2", (2, 9), "expected ',' or ']', found end of input"),
        ("HEADER:{f:A,t:B,s:1}\nPLAN:[(i:1,t:x,s:P]", (2, 19), "expected ',' or ')', found \"]\""),
        ("HEADER:{f:A,t:B,s:1}\nX_A:{n:1.}", (2, 10), "expected a digit after '.'"),
        ("HEADER:{f:A,t:B,s:1}\nX_A:{n:-x}", (2, 9), "expected a digit, found \"x\""),
        ("HEADER:{f:A,t:B,s:1}\nX_A:{n:1e5}", (2, 9), "expected ',' or '}', found \"e5\""),
        ("HEADER:{f:A,t:B,s:1}\n42:{}", (2, 1), "expected a block type such as REQ"),
    ];
    for (text, pos, needle) in cases {
        let (l, c, k, msg) = fail(text);
        assert!(matches!(k, ParseErrorKind::Unexpected { .. }), "{text}: {k:?}");
        assert_eq!((l, c), *pos, "{text}: {msg}");
        assert!(msg.contains(needle), "{text}: {msg}");
    }
}

#[test]
fn wrong_body_shape() {
    let k = fail("HEADER:{f:A,t:B,s:1}\nPLAN:{i:1}").2;
    assert!(matches!(k, ParseErrorKind::InvalidBody { block: "PLAN", .. }));
    let k = fail("HEADER:[1]\nRES:{o:A}").2;
    assert!(matches!(k, ParseErrorKind::InvalidBody { block: "HEADER", .. }));
    let k = fail("HEADER:{f:A,t:B,s:1}\nREQ:[o]").2;
    assert!(matches!(k, ParseErrorKind::InvalidBody { block: "REQ", .. }));
}

#[test]
fn string_escapes_and_their_errors() {
    let m = parse(
        r#"HEADER:{f:A,t:B,s:1}
RES:{o:"a\"b\\c\/d\n\t\u00e9\ud83d\ude00"}"#,
    )
    .unwrap();
    let ldp_llmx::Block::Res(r) = &m.blocks[0] else { panic!() };
    assert_eq!(r.option, "a\"b\\c/d\n\té😀");

    for (text, pos) in [
        ("HEADER:{f:A,t:B,s:1}\nRES:{o:\"a\\qb\"}", (2, 10)),
        ("HEADER:{f:A,t:B,s:1}\nRES:{o:\"\\u12\"}", (2, 9)),
        ("HEADER:{f:A,t:B,s:1}\nRES:{o:\"\\ud800x\"}", (2, 9)),
        ("HEADER:{f:A,t:B,s:1}\nRES:{o:\"\\udc00\"}", (2, 9)),
    ] {
        let (l, c, k, _) = fail(text);
        assert_eq!(k, ParseErrorKind::InvalidEscape, "{text}");
        assert_eq!((l, c), pos, "{text}");
    }
    let (l, c, k, _) = fail("HEADER:{f:A,t:B,s:1}\nRES:{o:\"line\nbreak\"}");
    assert_eq!(k, ParseErrorKind::ControlCharacter);
    assert_eq!((l, c), (2, 13));
}

#[test]
fn columns_count_characters_not_bytes() {
    let (l, c, _, _) = fail("HEADER:{f:A,t:B,s:1}\nRES:{o:\"ééé\" x}");
    assert_eq!((l, c), (2, 14));
}

#[test]
fn numbers_out_of_range() {
    let big = "9".repeat(400);
    let k = fail(&format!("HEADER:{{f:A,t:B,s:1}}\nX_A:{{n:{big}.0}}")).2;
    assert!(matches!(k, ParseErrorKind::Unexpected { expected: "a number within the range of f64", .. }));
    let m = parse("HEADER:{f:A,t:B,s:18446744073709551615}\nRES:{o:A}").unwrap();
    assert_eq!(m.header.seq, u64::MAX);
    // Integers beyond u64 are kept as decimals rather than refused.
    let m = parse("HEADER:{f:A,t:B,s:1}\nX_A:{n:99999999999999999999}").unwrap();
    assert_eq!(m.to_string(), "HEADER:{f:A,t:B,s:1}\nX_A:{n:100000000000000000000.0}\n");
    let m = parse("HEADER:{f:A,t:B,s:1}\nX_A:{n:-9223372036854775808}").unwrap();
    assert_eq!(m.to_string(), "HEADER:{f:A,t:B,s:1}\nX_A:{n:-9223372036854775808}\n");
}

#[test]
fn nesting_limit_is_a_typed_error_not_a_stack_overflow() {
    let deep = format!("HEADER:{{f:A,t:B,s:1}}\nX_A:{{v:{}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let (l, c, k, _) = fail(&deep);
    assert_eq!(k, ParseErrorKind::TooDeep { limit: ldp_llmx::DEFAULT_MAX_DEPTH });
    assert_eq!((l, c), (2, 8 + 127));
    // Within the limit it parses; the limit can be lowered.
    let ok = format!("HEADER:{{f:A,t:B,s:1}}\nX_A:{{v:{}1{}}}", "(a:".repeat(100), ")".repeat(100));
    assert!(parse(&ok).is_ok());
    let err = Parser::new().max_depth(10).parse(&ok).unwrap_err();
    assert_eq!(err.parse_kind(), Some(&ParseErrorKind::TooDeep { limit: 10 }));
}

#[test]
fn invalid_utf8_is_located() {
    let err = Parser::new().parse_bytes(b"HEADER:{f:A,t:B,s:1}\nRES:{o:\"ab\xff\"}").unwrap_err();
    assert_eq!(err.parse_kind(), Some(&ParseErrorKind::InvalidUtf8));
    assert_eq!(err.position(), Some(Position { line: 2, column: 11 }));
}

#[test]
fn nack_carries_the_position() {
    let err = parse("HEADER:{f:A,t:B,s:1}\nREQ:{o:x,pr:0}").unwrap_err();
    let nack = ldp_llmx::Res::nack(&err);
    assert_eq!(
        nack.msg.as_deref(),
        Some(
            "parse error: invalid field 'pr' in REQ: expected an integer from 1 (critical) to 5 (low) at line 2, column 13"
        )
    );
}

#[test]
fn byte_order_mark_is_skipped() {
    let m = parse("\u{feff}HEADER:{f:A,t:B,s:1}\nRES:{o:ACK}").unwrap();
    assert_eq!(m.header.from, "A");
    let err = parse("\u{feff}HEADER:{f:A,t:B,s:1}\nREQ:{o:x}").unwrap_err();
    assert_eq!(err.position(), Some(Position { line: 2, column: 1 }));
}
