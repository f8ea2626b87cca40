//! Every fenced block of llmx-v1.md (a verbatim copy in `data/`): each example parses and is its own canonical text
//! (modulo whitespace); the blocks that are templates, grammar or flow diagrams are listed by name below, so that a
//! block is never skipped silently.
//!
//! Also the spec sentences about syntax, message shape and sequence numbers, each quoted by the test enforcing it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_llmx::{
    Block, Message, Parser, SequenceTracker, Value, WriteStyle, parse, parse_all, sequence_warnings, write_all,
    write_with,
};

const SPEC: &str = include_str!("data/llmx-v1.md");

/// The header put in front of example blocks that the spec shows without one; removed again before comparing.
const H: &str = "HEADER:{f:A,t:B,s:1}\n";

/// The first lines of the fenced blocks that are not messages: schematic shapes (section 2.1, the field templates of
/// section 3, section 8.1's extension pattern), the flow diagrams of section 6 and the EBNF of Appendix A.
const NOT_EXAMPLES: [&str; 16] = [
    "HEADER:{field:value,...}",
    "HEADER:{f:SENDER,t:TARGET,s:SEQUENCE,b?:BATCH_ID}",
    "CTX:{p:PROJECT,f?:[FILES],st?:{STATE},issue?:ISSUE_ID}",
    "REQ:{o:OBJECTIVE,pr:PRIORITY,d?:[DEPENDENCIES],exp?:[EXPERTS]}",
    "PLAN:[(i:ID,t:TASK,s:STATUS),...]",
    "ACT:{i?:ID,op:OPERATION,tgt:TARGET,args?:{ARGUMENTS}}",
    "OBS:{ai?:ACT_ID,s:STATUS,c:{CONTENT},e?:ERROR_MSG}",
    "BLK:{w:WHY,a:[ALTERNATIVES],esc?:ESCALATE}",
    "ASK:{q:QUESTION,o:[OPTIONS],def?:DEFAULT}",
    "END:{n:NEXT_ACTION,t?:[TESTS],r?:[RISKS],del:[DELIVERABLES]}",
    "RES:{o:OPTION,msg?:MESSAGE}",
    "Agent A                    Agent B",
    "Orchestrator              Worker",
    "Worker                  Orchestrator              Human",
    "X_TYPENAME:{field:value,...}",
    "message     = header , { block } ;",
];

/// The fenced blocks of the spec, in order.
fn fenced_blocks() -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in SPEC.lines() {
        if line.starts_with("```") {
            match current.take() {
                Some(lines) => out.push(lines.join("\n")),
                None => current = Some(Vec::new()),
            }
        } else if let Some(lines) = &mut current {
            lines.push(line);
        }
    }
    out
}

/// The text with whitespace outside strings removed.
fn squeeze(text: &str) -> String {
    let mut out = String::new();
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if !c.is_whitespace() {
            out.push(c);
            in_string = c == '"';
        }
    }
    out
}

/// Parses an example: as it is when it starts with a HEADER, else under [`H`]; returns the messages and whether
/// [`H`] was added.
fn parse_example(example: &str) -> (Vec<Message>, bool) {
    let headed = example.trim_start().starts_with("HEADER:");
    let text = if headed { example.to_owned() } else { format!("{H}{example}") };
    let messages = parse_all(&text).unwrap_or_else(|e| panic!("spec example does not parse: {e}\n{example}"));
    (messages, !headed)
}

/// Section 2.2: "String values use double quotes: `"value"`", and Appendix A: `string = '"' , { char } , '"'`.
/// The canonical writer keeps the quotes the spec writes and leaves bare only what its examples leave bare, so every
/// example is its own canonical text (`ldp llmx fmt` prints it back unchanged, modulo whitespace).
#[test]
fn every_spec_example_parses_and_is_its_own_canonical_text() {
    let blocks = fenced_blocks();
    let mut examples = 0;
    let mut listed = 0;
    for block in &blocks {
        let first = block.lines().next().unwrap_or("");
        if NOT_EXAMPLES.contains(&first) {
            listed += 1;
            continue;
        }
        let (messages, added) = parse_example(block);
        let mut canonical = write_all(&messages);
        if added {
            canonical = canonical.strip_prefix(H).unwrap().to_owned();
        }
        assert_eq!(squeeze(&canonical), squeeze(block), "canonical text differs from the spec's example");
        // And the canonical text reads back as the same messages.
        let text = if added { format!("{H}{canonical}") } else { canonical };
        assert_eq!(parse_all(&text).unwrap(), messages);
        examples += 1;
    }
    // Every listed block was met once.
    assert_eq!(listed, NOT_EXAMPLES.len(), "a listed template is no longer in the spec");
    assert_eq!(blocks.len(), 32);
    assert_eq!(examples, 16);
}

/// Section 2.2: "String values use double quotes"; section 3.8's example writes `def:"JWT"`, section 3.2's
/// `st:{phase:"P1",env:"dev"}` and section 5.1's `args:{q:"TODO"}`: free-text strings stay quoted even when they are
/// plain words. Section 3.1's `f:Claude,t:Gemini` and section 3.5's `i:A1,op:edit` stay bare.
#[test]
fn canonical_quotes_free_text_and_leaves_identifiers_bare() {
    let m = parse(
        "HEADER:{f:Claude,t:Gemini,s:1,b:B1}\nCTX:{p:myapp,st:{phase:P1}}\nASK:{q:which,o:[JWT],def:JWT}\n\
         ACT:{i:A3,op:search,tgt:x,args:{q:TODO}}\nOBS:{ai:A3,s:OK,c:{k:v}}\nPLAN:[(i:S1,t:go,s:C)]\n\
         RES:{o:ACK,msg:ok,x_team:frontend}",
    )
    .unwrap();
    assert_eq!(
        ldp_llmx::write(&m),
        "HEADER:{f:Claude,t:Gemini,s:1,b:B1}\nCTX:{p:myapp,st:{phase:\"P1\"}}\n\
         ASK:{q:\"which\",o:[\"JWT\"],def:\"JWT\"}\nACT:{i:A3,op:search,tgt:\"x\",args:{q:\"TODO\"}}\n\
         OBS:{ai:A3,s:OK,c:{k:\"v\"}}\nPLAN:[(i:S1,t:\"go\",s:C)]\nRES:{o:\"ACK\",msg:\"ok\",x_team:\"frontend\"}\n"
    );
    // An identifier that is not a plain word is quoted as any string.
    let m = parse("HEADER:{f:\"gpt 4o\",t:\"a-b\",s:1}").unwrap();
    assert_eq!(ldp_llmx::write(&m), "HEADER:{f:\"gpt 4o\",t:\"a-b\",s:1}\n");
}

/// The compact style, an option outside the spec's grammar for free text, leaves every plain word bare and still
/// reads back as the same message.
#[test]
fn compact_style_is_bare_and_round_trips() {
    let m = parse("HEADER:{f:A,t:B,s:1}\nASK:{q:\"which\",o:[\"JWT\",\"two words\"],def:\"JWT\"}").unwrap();
    let compact = write_with(&m, WriteStyle::Compact);
    assert_eq!(compact, "HEADER:{f:A,t:B,s:1}\nASK:{q:which,o:[JWT,\"two words\"],def:JWT}\n");
    assert_eq!(parse(&compact).unwrap(), m);
    let Block::Ask(a) = &m.blocks[0] else { panic!() };
    assert_eq!(a.default.as_deref(), Some("JWT"));
    // Values keep their types: a quoted "true" is a string, and stays quoted in both styles.
    let m = parse("HEADER:{f:A,t:B,s:1}\nX_T:{a:\"true\",b:true}").unwrap();
    assert_eq!(write_with(&m, WriteStyle::Compact), "HEADER:{f:A,t:B,s:1}\nX_T:{a:\"true\",b:true}\n");
    let Block::Extension(e) = &parse(&write_with(&m, WriteStyle::Compact)).unwrap().blocks[0] else { panic!() };
    let ldp_llmx::BlockBody::Object(o) = e.body() else { panic!() };
    assert_eq!(o.get("a"), Some(&Value::from("true")));
}

/// Appendix A: `message = header , { block }`: a HEADER alone is a message, as section 3.1's examples show.
#[test]
fn header_only_messages_are_messages() {
    let all = parse_all("HEADER:{f:Claude,t:Gemini,s:1}\nHEADER:{f:Orchestrator,t:ALL,s:42,b:B1}").unwrap();
    assert_eq!(all.len(), 2);
    assert!(all.iter().all(|m| m.blocks.is_empty()));
    assert_eq!(write_all(&all), "HEADER:{f:Claude,t:Gemini,s:1}\nHEADER:{f:Orchestrator,t:ALL,s:42,b:B1}\n");
}

/// Section 3.1: "`s` | Number | Yes | Sequence number (monotonic)". The spec gives no MUST and no error answer, so
/// a sequence number that does not increase for its sender is a warning (section 7.3's `RES:{o:"WARN",...}` form),
/// not a refusal.
#[test]
fn sequence_numbers_that_do_not_increase_are_warned_about() {
    let all = parse_all(
        "HEADER:{f:Claude,t:Gemini,s:2}\nHEADER:{f:Claude,t:Gemini,s:1}\nHEADER:{f:Gemini,t:Claude,s:1}\n\
         HEADER:{f:Claude,t:Gemini,s:2}\nHEADER:{f:Claude,t:Gemini,s:3}",
    )
    .unwrap();
    let warnings = sequence_warnings(&all);
    let msgs: Vec<_> = warnings.iter().map(|w| (w.option.as_str(), w.msg.as_deref().unwrap())).collect();
    assert_eq!(
        msgs,
        vec![
            ("WARN", "sequence number s:1 from Claude does not increase (previous s:2)"),
            // A repeat is not an increase either.
            ("WARN", "sequence number s:2 from Claude does not increase (previous s:2)"),
        ]
    );
    // Section 5.2's batch: Claude's s:1, then Gemini's s:2: in order.
    let mut t = SequenceTracker::new();
    assert!(t.observe(&parse("HEADER:{f:Claude,t:ALL,s:1,b:B1}").unwrap().header).is_none());
    assert!(t.observe(&parse("HEADER:{f:Gemini,t:Claude,s:2,b:B1}").unwrap().header).is_none());
}

/// The streaming reader gives what `parse_all` gives, with the same positions in errors, whatever the read sizes.
#[test]
fn reader_matches_parse_all() {
    let text = format!(
        "\u{feff}  \n{}",
        SPEC.lines().filter(|l| l.starts_with("HEADER:{f:") && !l.contains('?')).collect::<Vec<_>>().join("\n")
    );
    let whole = parse_all(&text).unwrap();
    let streamed: Vec<Message> = Parser::new().reader(OneByte(text.as_bytes())).collect::<Result<_, _>>().unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(whole.len(), 4);

    // HEADER inside a string or an object does not cut a message; an error's position is the whole file's.
    let text = "HEADER:{f:A,t:B,s:1}\nX_A:{HEADER:1,\nx:\"HEADER:{\",y:[\nHEADER]}\n  HEADER:{f:A,t:B,s:2}\nREQ:{o:\"x\",pr:9}\n";
    let err_whole = parse_all(text).unwrap_err();
    let mut reader = Parser::new().reader(OneByte(text.as_bytes()));
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.blocks.len(), 1);
    let err = reader.next().unwrap().unwrap_err();
    assert_eq!(err, err_whole);
    assert_eq!(err.position().map(|p| (p.line, p.column)), Some((6, 15)));
    assert!(reader.next().is_none());

    // An error on the first line of a later message, which starts mid-line.
    let text = "HEADER:{f:A,t:B,s:1} HEADER:{f:A,t:B,s:2,q:1}";
    let err_whole = parse_all(text).unwrap_err();
    let streamed: Result<Vec<_>, _> = Parser::new().reader(OneByte(text.as_bytes())).collect();
    assert_eq!(streamed.unwrap_err(), err_whole);
    assert_eq!(err_whole.position().map(|p| p.line), Some(1));
}

/// A message longer than the reader's limit is refused before it is held whole.
#[test]
fn reader_refuses_a_message_above_its_limit() {
    let big = format!("HEADER:{{f:A,t:B,s:1}}\nREQ:{{o:\"{}\",pr:1}}\n", "x".repeat(300_000));
    let mut reader = Parser::new().max_message_bytes(100_000).reader(big.as_bytes());
    let err = reader.next().unwrap().unwrap_err();
    assert_eq!(err.parse_kind(), Some(&ldp_llmx::ParseErrorKind::MessageTooLarge { limit: 100_000 }));
    assert!(reader.next().is_none());
}

/// A reader that hands out one byte at a time, to cut every token at every place.
struct OneByte<'a>(&'a [u8]);

impl std::io::Read for OneByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match (self.0.split_first(), buf.is_empty()) {
            (Some((b, rest)), false) => {
                buf[0] = *b;
                self.0 = rest;
                Ok(1)
            }
            _ => Ok(0),
        }
    }
}
