//! Property tests for the request parser: any `write_codebase` body an attacker can send is
//! either refused with an error naming a field, or becomes a [`Batch`] that keeps every promise
//! (1 to 5 files, sandboxed and distinct paths, non-empty descriptions). Never a panic.
//! 256 cases per property unless `PROPTEST_CASES` says otherwise (CI runs the default; run
//! `PROPTEST_CASES=100000 cargo test -p writ-core --test request_properties` for a longer search).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use writ_core::synthesis::{Batch, WriteCodebaseRequest};

/// Path-ish strings biased toward what attacks a sandbox: `..`, absolute, NUL, backslashes,
/// Windows drives, unicode look-alikes, empty segments, long names.
fn hostile_path() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        Just("..".to_string()),
        Just(".".to_string()),
        Just("".to_string()),
        Just("/".to_string()),
        Just("\\".to_string()),
        Just("C:".to_string()),
        Just("\0".to_string()),
        Just("\u{2215}".to_string()),
        Just("src".to_string()),
        Just("a.py".to_string()),
        Just("~".to_string()),
        "[a-zA-Z0-9_.-]{1,12}",
        "\\PC{1,6}",
        "x{200,300}",
    ];
    prop::collection::vec(atom, 1..6).prop_flat_map(|parts| {
        prop::sample::select(vec!["/", "\\", "//", "/./"]).prop_map(move |sep| parts.join(sep))
    })
}

fn file_value() -> impl Strategy<Value = Value> {
    (
        prop::option::of(hostile_path()),
        prop::option::of(prop_oneof![
            "\\PC{0,40}",
            Just(String::new()),
            "x{5000,6000}"
        ]),
        prop::collection::vec("\\PC{0,10}", 0..3),
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(filename, description, imports, extra)| {
            let mut f = json!({});
            if let Some(n) = filename {
                f["filename"] = json!(n);
            }
            if let Some(d) = description {
                f["code_description"] = json!(d);
            }
            f["external_imports"] = json!(imports);
            if extra == Some(true) {
                f["unexpected"] = json!(1);
            }
            f
        })
}

fn request_value() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just("write_codebase".to_string()), "\\PC{0,15}"],
        prop::collection::vec(file_value(), 0..8),
        prop::option::of("\\PC{0,30}"),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(command, files, task, dry_run, atomic)| {
            let mut v = json!({"command": command, "files": files,
                               "options": {"dry_run": dry_run, "atomic": atomic}});
            if let Some(t) = task {
                v["task_description"] = json!(t);
            }
            v
        })
}

fn check(value: Value) {
    let Ok(req) = serde_json::from_value::<WriteCodebaseRequest>(value) else {
        return; // refused by the JSON layer, which names the field itself
    };
    match Batch::parse(req) {
        Err(e) => {
            assert!(!e.field.is_empty(), "an error names its field: {e:?}");
            assert!(!e.message.is_empty());
        }
        Ok(batch) => {
            assert!((1..=5).contains(&batch.files().len()));
            let mut seen = HashSet::new();
            for f in batch.files() {
                let p = f.path().as_str();
                assert!(
                    !p.is_empty() && !p.starts_with('/') && !p.contains('\0'),
                    "{p:?}"
                );
                assert!(p.split('/').all(|s| s != ".." && !s.is_empty()), "{p:?}");
                assert!(seen.insert(p.to_string()), "duplicate path {p:?}");
                assert!(!f.description().trim().is_empty());
            }
        }
    }
}

proptest! {
    #[test]
    fn any_structured_request_is_refused_by_field_or_parsed_into_a_sound_batch(v in request_value()) {
        check(v);
    }

    /// Random bytes are almost never JSON, so they would test serde, not writ: start from a
    /// well-formed request and damage it a few bytes at a time, which keeps most cases parseable
    /// JSON that reaches the request types and `Batch::parse`.
    #[test]
    fn damaged_requests_never_panic_the_parser(
        v in request_value(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        let mut bytes = serde_json::to_vec(&v).unwrap();
        for (at, byte, how) in edits {
            let i = at.index(bytes.len().max(1));
            match how {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i.min(bytes.len()), byte),
                _ if i < bytes.len() => { bytes.remove(i); }
                _ => {}
            }
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
            check(v);
        }
    }
}
