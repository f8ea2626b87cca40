//! The committed catalogue files are generated from `src/catalogue.rs`, and the checks and the catalogue agree.
//! Regenerate with `UPDATE_CATALOGUE=1 cargo test -p ldp-conformance --test integration catalogue::`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use ldp_conformance::catalogue::{catalogue_json, catalogue_markdown};
use ldp_conformance::{CATALOGUE, CHECKS};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("catalogue")
}

#[test]
fn committed_catalogue_is_current() {
    let mut json = serde_json::to_string_pretty(&catalogue_json()).unwrap();
    json.push('\n');
    let md = catalogue_markdown();
    let files = [("ldp-0.1.json", json), ("ldp-0.1.md", md)];
    if std::env::var_os("UPDATE_CATALOGUE").is_some() {
        std::fs::create_dir_all(dir()).unwrap();
        for (name, text) in &files {
            std::fs::write(dir().join(name), text).unwrap();
        }
    }
    for (name, text) in &files {
        let committed = std::fs::read_to_string(dir().join(name)).unwrap_or_default();
        assert!(
            committed == *text,
            "conformance/catalogue/{name} is stale: run UPDATE_CATALOGUE=1 cargo test -p ldp-conformance --test integration catalogue::"
        );
    }
}

#[test]
fn checks_and_requirements_agree() {
    for r in CATALOGUE {
        for c in r.checks {
            let check = CHECKS.iter().find(|k| k.id == *c).unwrap_or_else(|| panic!("{}: no check {c}", r.id));
            assert!(check.requirements.contains(&r.id), "check {c} does not list {}", r.id);
        }
    }
    for c in CHECKS {
        for id in c.requirements {
            let r = CATALOGUE.iter().find(|r| r.id == *id).unwrap_or_else(|| panic!("{}: no requirement {id}", c.id));
            assert!(r.checks.contains(&c.id), "{id} does not list check {}", c.id);
        }
    }
}
