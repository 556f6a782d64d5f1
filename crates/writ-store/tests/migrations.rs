//! Migrations are append-only: a database that applied one must find the same text in every
//! later build, or sqlx refuses to start. `migrations/SHA384SUMS` (the `sha384sum` format, so
//! `cd migrations && sha384sum -c SHA384SUMS` checks it too) pins each released migration; a new
//! migration gets a line appended, an old one is never edited.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha384};
use writ_store::Dialect;

fn pinned() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    std::fs::read_to_string(root.join("SHA384SUMS"))
        .unwrap()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (sum, file) = line.split_once("  ").expect("`<sha384>  <file>` per line");
            (file.to_owned(), sum.to_owned())
        })
        .collect()
}

fn on_disk() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations");
    let mut files = BTreeMap::new();
    for backend in ["postgres", "sqlite"] {
        for entry in std::fs::read_dir(root.join(backend)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "sql") {
                let name = format!("{backend}/{}", path.file_name().unwrap().to_string_lossy());
                let sum = hex::encode(Sha384::digest(std::fs::read(&path).unwrap()));
                files.insert(name, sum);
            }
        }
    }
    files
}

#[test]
fn migrations_are_append_only() {
    let pinned = pinned();
    let on_disk = on_disk();
    for (file, sum) in &pinned {
        match on_disk.get(file) {
            None => {
                panic!("migration {file} was released and is gone: migrations are never removed")
            }
            Some(now) => assert_eq!(
                now, sum,
                "migration {file} was edited after its release: add a new migration instead"
            ),
        }
    }
    let unpinned: Vec<&String> = on_disk
        .keys()
        .filter(|f| !pinned.contains_key(*f))
        .collect();
    assert!(
        unpinned.is_empty(),
        "new migrations {unpinned:?}: append their `sha384sum` lines to migrations/SHA384SUMS"
    );
}

/// The checksum sqlx stamps a database with is the SHA-384 of the file, so the pinned sums are
/// exactly what a migrated database holds.
#[test]
fn the_pinned_sums_are_what_sqlx_stamps() {
    let pinned = pinned();
    for (backend, migrator) in [
        ("postgres", <sqlx::Postgres as Dialect>::migrator()),
        ("sqlite", <sqlx::Sqlite as Dialect>::migrator()),
    ] {
        for migration in migrator.iter() {
            let prefix = format!("{backend}/{:04}_", migration.version);
            let (file, sum) = pinned
                .iter()
                .find(|(file, _)| file.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no pinned sum for {prefix}"));
            assert_eq!(*sum, hex::encode(&*migration.checksum), "{file}");
        }
    }
}
