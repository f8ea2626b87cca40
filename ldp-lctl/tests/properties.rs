//! Property tests: the parser never panics, and writing then parsing gives the same document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use ldp_lctl::{
    Analysis, Chain, ChainStatus, Confidence, EndpointKeys, Fact, FactId, FactRegistry, Handoff, LctlDocument, Mapping,
    Purpose, TraceStep, Value, parse,
};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    // Deliberately YAML-hostile: quotes, colons, hashes, leading dashes, numbers, "yes", "~".
    prop_oneof![
        "[a-zA-Z0-9 _:#'\"\\-{}\\[\\],.!&*|>%@`]{0,24}",
        Just("3.0".to_owned()),
        Just("yes".to_owned()),
        Just("~".to_owned()),
        Just("null".to_owned()),
        Just("007".to_owned()),
        Just("- item".to_owned()),
        Just("line one\nline two\n".to_owned()),
        Just("  padded  ".to_owned()),
        "\\PC{0,12}",
    ]
}

fn confidence() -> impl Strategy<Value = Confidence> {
    (0u32..=100).prop_map(|n| Confidence::new(f64::from(n) / 100.0).unwrap())
}

fn fact_id() -> impl Strategy<Value = FactId> {
    "F[0-9]{1,3}".prop_map(|s| FactId::new(s).unwrap())
}

fn extra() -> impl Strategy<Value = Mapping> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Integer),
        (-1.0e6f64..1.0e6).prop_map(Value::Float),
        text().prop_map(Value::String),
    ];
    let value = scalar.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Sequence),
            prop::collection::vec(("x-[a-z]{1,6}", inner), 0..3)
                .prop_map(|entries| Value::Mapping(entries.into_iter().collect())),
        ]
    });
    prop::collection::vec(("x-[a-z]{1,8}", value), 0..3).prop_map(|e| e.into_iter().collect())
}

fn trace_step() -> impl Strategy<Value = TraceStep> {
    (
        (0u32..50, text(), prop::option::of(text()), prop::option::of(confidence())),
        (
            prop::collection::vec(fact_id(), 0..3),
            prop::collection::vec(fact_id(), 0..2),
            prop::collection::vec(fact_id(), 0..2),
        ),
        (any::<bool>(), prop::option::of(0u64..1_000_000), prop::option::of(text()), extra()),
    )
        .prop_map(|((step, agent, action, confidence), (added, modified, at_failure), rest)| {
            let (parallel, duration_ms, error, extra) = rest;
            TraceStep {
                step,
                agent,
                action,
                confidence,
                facts_added: added,
                facts_modified: modified,
                facts_at_failure: at_failure,
                parallel,
                duration_ms,
                error,
                extra,
            }
        })
}

fn chain() -> impl Strategy<Value = Chain> {
    (
        (text(), prop::option::of(0u32..100), prop::option::of(text()), prop::option::of(text())),
        (
            prop::option::of(prop_oneof![
                Just(ChainStatus::Failed),
                Just(ChainStatus::Completed),
                Just(ChainStatus::InProgress),
                Just(ChainStatus::Other("paused".into())),
            ]),
            prop::option::of(0u32..100),
            prop::option::of(any::<bool>()),
            any::<bool>(),
            extra(),
        ),
    )
        .prop_map(|((id, step, source, target), (status, failed, merge, short, extra))| Chain {
            id,
            step,
            status,
            failed_at_step: failed,
            parallel_merge: merge,
            // The spelling is only observable when an endpoint is written.
            endpoint_keys: if short && (source.is_some() || target.is_some()) {
                EndpointKeys::FromTo
            } else {
                EndpointKeys::SourceTarget
            },
            source,
            target,
            extra,
        })
}

fn facts() -> impl Strategy<Value = FactRegistry> {
    prop::collection::vec(
        (
            fact_id(),
            (text(), confidence(), prop::option::of(text()), prop::option::of(0u32..50)),
            (prop::option::of(text()), extra()),
        ),
        0..4,
    )
    .prop_map(|entries| {
        let mut registry = FactRegistry::new();
        for (id, (text, confidence, source, step), (note, extra)) in entries {
            registry.insert(id, Fact { text, confidence, source, step, note, extra });
        }
        registry
    })
}

fn document() -> impl Strategy<Value = LctlDocument> {
    (
        (
            prop::option::of(prop_oneof![
                Just(Purpose::Observability),
                Just(Purpose::Debugging),
                Just(Purpose::Other("audit".into())),
            ]),
            prop::option::of(chain()),
            prop::collection::vec(trace_step(), 0..4),
            facts(),
        ),
        (
            prop::option::of(
                (
                    prop::collection::vec(fact_id(), 0..3),
                    prop::collection::vec(fact_id(), 0..3),
                    prop::collection::vec(text(), 0..2),
                    extra(),
                )
                    .prop_map(|(critical_facts, context_facts, warnings, extra)| Handoff {
                        critical_facts,
                        context_facts,
                        warnings,
                        extra,
                    }),
            ),
            prop::option::of(text()),
            prop::option::of(
                (prop::option::of(text()), prop::option::of(confidence()), prop::option::of(text())).prop_map(
                    |(root_cause, confidence_in_analysis, recommendation)| Analysis {
                        root_cause,
                        confidence_in_analysis,
                        recommendation,
                        extra: Mapping::new(),
                    },
                ),
            ),
            extra(),
        ),
    )
        .prop_map(|((purpose, chain, trace, facts), (handoff, instruction, analysis, extra))| LctlDocument {
            purpose,
            chain,
            trace,
            facts,
            handoff,
            instruction,
            analysis,
            ack: None,
            extra,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parser_never_panics_on_arbitrary_text(input in "\\PC{0,200}") {
        let _ = parse(&input);
    }

    #[test]
    fn parser_never_panics_on_yaml_shaped_text(
        input in "(lctl: \"3.0\"\n)?([a-z_]{1,10}: ([-\\[\\]{}:,.0-9a-zA-Z\" ]{0,20})\n( {2,4}[a-z_-]{0,8}:? [\\[\\]{}0-9a-z.,-]{0,10}\n){0,4}){0,6}"
    ) {
        let _ = parse(&input);
    }

    #[test]
    fn write_then_parse_is_identity(doc in document()) {
        let yaml = doc.to_yaml().unwrap();
        let back = parse(&yaml);
        prop_assert_eq!(back.as_ref().ok(), Some(&doc), "yaml:\n{}\nerror: {:?}", yaml, back.as_ref().err());
    }

    #[test]
    fn checks_and_renders_never_panic(doc in document()) {
        let _ = ldp_lctl::check_document(&doc);
        let _ = ldp_lctl::check_chain(&[doc.clone(), doc.clone()]);
        for format in [ldp_lctl::RenderFormat::Mermaid, ldp_lctl::RenderFormat::Dot, ldp_lctl::RenderFormat::Timeline] {
            let _ = ldp_lctl::render(&doc, format);
        }
        let _ = ldp_lctl::receive_document(doc, Some("receiver"));
    }
}
