//! The index against a fresh walk: after random writes, renames and removals, made through the
//! workspace and behind its back, every search the index answers is the walk's answer, and the
//! import graph it keeps is the one the files' import lines give.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use writ_core::search::{Freshness, SearchQuery, SearchResults, import_names, imports_in};
use writ_core::{RepoPath, Workspace};

use crate::RepoWorkspace;

const PATHS: &[&str] = &[
    "a.py", "a/b.py", "a/c.log", "a/d/e.py", "b/f.py", "b/g.txt", "h.txt",
];
const DIRS: &[&str] = &["a", "a/d", "b", "c"];
const TEXTS: &[&str] = &[
    "",
    "needle\n",
    "def needle():\n    return 1\n",
    "x = Needle()\nhaystack_needle = 2\n",
    "nothing here\nxx\n",
    "import a.b\nclass Hay:\n    pass\n",
    "from a.d import e\nfrom b import f\nimport e\n",
];
const IGNORES: &[&str] = crate::rules::IGNORE_SAMPLES;
/// The ignore files a folder may hold: the walker reads both, `.ignore` first.
const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

#[derive(Debug, Clone)]
enum Op {
    Write(usize, usize),
    Remove(usize),
    WriteBehind(usize, usize),
    RemoveBehind(usize),
    RenameBehind(usize, usize),
    RenameDirBehind(usize, usize),
    IgnoreBehind(usize, usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let path = 0..PATHS.len();
    let text = 0..TEXTS.len();
    prop_oneof![
        (path.clone(), text.clone()).prop_map(|(p, t)| Op::Write(p, t)),
        path.clone().prop_map(Op::Remove),
        (path.clone(), text).prop_map(|(p, t)| Op::WriteBehind(p, t)),
        path.clone().prop_map(Op::RemoveBehind),
        (path.clone(), path).prop_map(|(a, b)| Op::RenameBehind(a, b)),
        (0..DIRS.len(), 0..DIRS.len()).prop_map(|(a, b)| Op::RenameDirBehind(a, b)),
        (0..3_usize, 0..IGNORES.len(), 0..IGNORE_FILES.len())
            .prop_map(|(d, i, f)| Op::IgnoreBehind(d, i, f)),
    ]
}

fn queries() -> Vec<SearchQuery> {
    let q = |pattern: &str, regex: bool, ignore_case: bool| SearchQuery {
        pattern: pattern.into(),
        regex,
        ignore_case,
        dir: RepoPath::root(),
        glob: None,
        context_lines: 1,
        max_matches: 1_000,
        max_files: 1_000,
        max_file_bytes: 1 << 20,
        time_limit: Duration::from_secs(30),
        freshness: Freshness::Current,
        keep_compiled: false,
    };
    let mut all = vec![
        q("needle", false, false),
        q("NEEDLE", false, true),
        q("nee", false, false),
        q(r"def \w+\(", true, false),
        q("needle|Hay", true, false),
        q("^x+$", true, false),
        q(r"(?i)class\s+hay", true, false),
        q("import a.b", false, false),
    ];
    let mut in_dir = q("needle", false, true);
    in_dir.dir = RepoPath::parse_dir("a").unwrap();
    all.push(in_dir);
    let mut globbed = q("needle", false, false);
    globbed.glob = Some("*.py".into());
    all.push(globbed);
    all
}

fn put(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    if std::fs::create_dir_all(path.parent().unwrap()).is_ok() {
        let _ = std::fs::write(path, text);
    }
}

async fn apply(ws: &RepoWorkspace, root: &Path, op: &Op) {
    match op {
        Op::Write(p, t) => {
            let path = RepoPath::parse(PATHS[*p]).unwrap();
            if let Ok(staged) = ws.stage(&path, TEXTS[*t].as_bytes(), true).await {
                let _ = staged.publish().await;
            }
        }
        Op::Remove(p) => {
            let _ = ws.remove(&RepoPath::parse(PATHS[*p]).unwrap()).await;
        }
        Op::WriteBehind(p, t) => put(root, PATHS[*p], TEXTS[*t]),
        Op::RemoveBehind(p) => {
            let _ = std::fs::remove_file(root.join(PATHS[*p]));
        }
        Op::RenameBehind(a, b) => {
            let to = root.join(PATHS[*b]);
            if std::fs::create_dir_all(to.parent().unwrap()).is_ok() {
                let _ = std::fs::rename(root.join(PATHS[*a]), to);
            }
        }
        Op::RenameDirBehind(a, b) => {
            let _ = std::fs::rename(root.join(DIRS[*a]), root.join(DIRS[*b]));
        }
        Op::IgnoreBehind(d, i, f) => {
            let file = IGNORE_FILES[*f];
            let path = match ["", "a", "b"][*d] {
                "" => file.to_owned(),
                dir => format!("{dir}/{file}"),
            };
            put(root, &path, IGNORES[*i]);
        }
    }
}

/// Writes a file behind the workspace's back and waits until the index shows it: the watcher
/// reports changes in order, so every change made before it has been applied too.
fn barrier(ws: &RepoWorkspace, root: &Path, n: usize) {
    let token = format!("barrier{n}token");
    put(root, ".barrier", &token);
    let index = ws.index().unwrap();
    let mut query = queries().remove(0);
    query.pattern = token;
    let started = Instant::now();
    loop {
        let prepared = ws.tree().prepare(&query).unwrap();
        if let Some(found) = index.search(&query, prepared, Instant::now())
            && !found.matches.is_empty()
        {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the index did not show a change made outside writ within 10 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn summary(r: &SearchResults) -> (Vec<writ_core::search::SearchMatch>, usize, usize, usize) {
    (
        r.matches.clone(),
        r.files_searched,
        r.files_matched,
        r.files_skipped,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn after_any_changes_the_index_answers_every_search_as_a_fresh_walk_does(
        ops in proptest::collection::vec(op(), 1..14)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let base = tempfile::tempdir().unwrap();
            let root = base.path().join("root");
            put(&root, "a/b.py", TEXTS[2]);
            put(&root, "h.txt", TEXTS[3]);
            let ws = RepoWorkspace::open(&root).await.unwrap().with_index();
            assert!(ws.index_caught_up(Duration::from_secs(10)).await, "the first build ends");
            for (n, op) in ops.iter().enumerate() {
                apply(&ws, &root, op).await;
                barrier(&ws, &root, n);
                let fresh = RepoWorkspace::open(&root).await.unwrap();
                let index = ws.index().unwrap();
                for query in queries() {
                    let Ok(walked) = fresh.search(query.clone()).await else {
                        // The directory searched is gone: refused before either looks.
                        assert!(ws.tree().prepare(&query).is_err());
                        continue;
                    };
                    let prepared = ws.tree().prepare(&query).unwrap();
                    let indexed = index
                        .search(&query, prepared, Instant::now())
                        .expect("the index is current after the barrier");
                    assert_eq!(
                        summary(&indexed),
                        summary(&walked),
                        "{:?} after {:?}", query.pattern, &ops[..=n]
                    );
                }
                let walked = fresh.walk(&RepoPath::root(), None, 1_000).await.unwrap();
                let indexed = ws.walk(&RepoPath::root(), None, 1_000).await.unwrap();
                assert_eq!(indexed.files, walked.files, "the walk after {:?}", &ops[..=n]);
                for path in PATHS {
                    let mut graph = Vec::new();
                    for f in &walked.files {
                        if f.path.as_str() == *path || !f.path.as_str().ends_with(".py") {
                            continue;
                        }
                        let text = std::fs::read_to_string(root.join(f.path.as_str())).unwrap();
                        let n = imports_in(&text).iter().filter(|i| import_names(i, path)).count();
                        if n > 0 {
                            graph.push((f.path.as_str().to_owned(), n));
                        }
                    }
                    graph.sort();
                    let mut from_index = index.importers(path).expect("the index is current");
                    from_index.sort();
                    assert_eq!(from_index, graph, "importers of {path} after {:?}", &ops[..=n]);
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_import_graph_follows_writes_made_through_writ_and_behind_its_back() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    put(&root, "shop/ledger.py", "def post(x):\n    return x\n");
    put(
        &root,
        "app/billing.py",
        "from shop.ledger import post\nimport shop.ledger as ledger\n",
    );
    put(&root, "app/other.py", "import ledger_tools\n");
    let ws = RepoWorkspace::open(&root).await.unwrap().with_index();
    assert!(ws.index_caught_up(Duration::from_secs(10)).await);
    let ledger = RepoPath::parse("shop/ledger.py").unwrap();
    let names = |found: Option<Vec<(RepoPath, usize)>>| {
        found
            .expect("the index answers")
            .into_iter()
            .map(|(p, n)| (p.as_str().to_owned(), n))
            .collect::<Vec<_>>()
    };
    // Both of billing's import lines name the ledger; `ledger_tools` is another module.
    assert_eq!(
        names(ws.importers(&ledger).await),
        [("app/billing.py".to_owned(), 2)]
    );

    // A write through writ adds an edge at once.
    ws.stage(
        &RepoPath::parse("app/report.py").unwrap(),
        b"import shop.ledger\n",
        true,
    )
    .await
    .unwrap()
    .publish()
    .await
    .unwrap();
    assert_eq!(
        names(ws.importers(&ledger).await),
        [
            ("app/billing.py".to_owned(), 2),
            ("app/report.py".to_owned(), 1)
        ]
    );

    // A rewrite behind writ's back that drops the import takes the edge away.
    put(&root, "app/billing.py", "def bill():\n    return 1\n");
    barrier(&ws, &root, 0);
    assert_eq!(
        names(ws.importers(&ledger).await),
        [("app/report.py".to_owned(), 1)]
    );

    // A removal through writ too.
    ws.remove(&RepoPath::parse("app/report.py").unwrap())
        .await
        .unwrap();
    assert_eq!(
        names(ws.importers(&ledger).await),
        Vec::<(String, usize)>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_folder_gives_the_map_its_first_files_of_each_kind_and_every_file_a_look_up_found()
{
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    for i in 0..40 {
        put(&root, &format!("big/m{i:02}.py"), "x = 1\n");
        put(&root, &format!("big/w{i:02}.js"), "let x = 1;\n");
    }
    // Imported by the file being written, and last of the folder by path.
    put(&root, "big/zz_helpers.py", "def help():\n    pass\n");
    let ws = RepoWorkspace::open(&root).await.unwrap().with_index();
    assert!(ws.index_caught_up(Duration::from_secs(10)).await);
    let index = ws.index().unwrap();
    let found = index
        .map_files(
            "big/new.py",
            &["big/zz_helpers".to_owned()],
            &["big/new.py".to_owned()],
            5,
        )
        .unwrap();
    let mut files: Vec<String> = found.files.iter().map(|f| f.0.clone()).collect();
    files.sort();
    // Five of each kind from the folder, five more of its extension beneath `big/` (the fill
    // for ties, here the same folder), and its import however late it sorts.
    let mut expected: Vec<String> = (0..10)
        .map(|i| format!("big/m{i:02}.py"))
        .chain((0..5).map(|i| format!("big/w{i:02}.js")))
        .collect();
    expected.push("big/zz_helpers.py".into());
    expected.sort();
    assert_eq!(files, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_map_finds_the_files_that_may_rank_by_look_ups() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    put(&root, "shop/notes.py", "x = 1\n");
    put(&root, "shop/sub/deep.py", "x = 1\n");
    put(&root, "shop/sub/deeper/a.py", "x = 1\n");
    put(&root, "shop/z.txt", "notes\n");
    put(&root, "tests/test_ledger.py", "x = 1\n");
    put(&root, "tests/test_other.py", "x = 1\n");
    put(&root, "app/billing.py", "from shop.ledger import post\n");
    put(&root, "lib/money.py", "CENTS = 100\n");
    put(&root, "vendor/lib/money.py", "CENTS = 1\n");
    put(&root, "other/x.py", "x = 1\n");
    put(&root, "README.md", "# r\n");
    let ws = RepoWorkspace::open(&root).await.unwrap().with_index();
    assert!(ws.index_caught_up(Duration::from_secs(10)).await);
    let index = ws.index().unwrap();
    let mut found = index
        .map_files(
            "shop/ledger.py",
            &["lib/money".to_owned(), "os".to_owned()],
            &["shop/ledger.py".to_owned()],
            1,
        )
        .unwrap();
    let mut files: Vec<String> = found.files.iter().map(|f| f.0.clone()).collect();
    files.sort();
    assert_eq!(
        files,
        [
            // its importer, the module it imports (wherever a folder holds it), its folder's own
            // files (not its subfolders'), its test, and one file of its extension beneath
            // `shop/` for the ties
            "app/billing.py",
            "lib/money.py",
            "shop/notes.py",
            "shop/sub/deep.py",
            "shop/z.txt",
            "tests/test_ledger.py",
            "vendor/lib/money.py",
        ]
    );
    assert_eq!(found.importers, [("app/billing.py".to_owned(), 1)]);
    found.extensions.sort();
    assert_eq!(
        found.extensions,
        [
            ("md".to_owned(), 1),
            ("py".to_owned(), 9),
            ("txt".to_owned(), 1)
        ]
    );
    // Every file it gives has its content key: its outline is kept without a read.
    assert!(found.files.iter().all(|f| f.2.is_some()));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_maps_look_ups_and_searches_asked_together_answer_as_asked_apart() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    put(
        &root,
        "shop/ledger.py",
        "from shop import tax\n\ndef post_entry():\n    pass\n",
    );
    put(
        &root,
        "shop/tax.py",
        "RATE = 3\n\ndef tax_of(x):\n    return x\n",
    );
    put(
        &root,
        "app/report.py",
        "from shop.ledger import post_entry\n",
    );
    let ws = RepoWorkspace::open(&root).await.unwrap().with_index();
    assert!(ws.index_caught_up(Duration::from_secs(10)).await);
    let search = |pattern: &str| SearchQuery {
        pattern: pattern.into(),
        regex: true,
        ignore_case: false,
        dir: RepoPath::root(),
        glob: Some("*.py".into()),
        context_lines: 0,
        max_matches: 100,
        max_files: 1_000,
        max_file_bytes: 1 << 20,
        time_limit: Duration::from_secs(30),
        freshness: Freshness::AsIndexed,
        keep_compiled: false,
    };
    let query = writ_core::search::MapQuery {
        path: RepoPath::parse("shop/new.py").unwrap(),
        modules: vec!["shop/tax".into()],
        exclude: vec![RepoPath::parse("shop/new.py").unwrap()],
        fill: 10,
    };
    let other = writ_core::search::MapQuery {
        path: RepoPath::parse("app/summary.py").unwrap(),
        modules: vec![],
        exclude: query.exclude.clone(),
        fill: 10,
    };
    // A batch's files asked at once: each answer as if asked alone.
    let mut answers = ws
        .map_lookups(vec![
            (
                query.clone(),
                vec![search(r"\bledger\b"), search("tax|RATE")],
            ),
            (other.clone(), vec![search("post_entry")]),
        ])
        .await
        .expect("the index answers");
    assert_eq!(answers.len(), 2, "one answer per file, in order");
    let (other_files, other_results) = answers.pop().unwrap();
    let (files, results) = answers.pop().unwrap();
    let alone = ws.map_files(&query).await.unwrap();
    let paths = |f: &writ_core::search::MapFiles| {
        let mut p: Vec<String> = f.files.iter().map(|w| w.path.to_string()).collect();
        p.sort();
        p
    };
    assert_eq!(paths(&files), paths(&alone));
    assert_eq!(
        paths(&other_files),
        paths(&ws.map_files(&other).await.unwrap())
    );
    assert!(paths(&other_files).contains(&"app/report.py".to_owned()));
    assert_eq!(other_results.len(), 1);
    assert_eq!(
        other_results[0].as_ref().unwrap().matches.len(),
        ws.search(search("post_entry")).await.unwrap().matches.len()
    );
    assert_eq!(results.len(), 2, "one answer per search, in order");
    for (got, pattern) in results.into_iter().zip([r"\bledger\b", "tax|RATE"]) {
        let apart = ws.search(search(pattern)).await.unwrap();
        let lines = |r: &SearchResults| {
            r.matches
                .iter()
                .map(|m| format!("{}:{}", m.path, m.line))
                .collect::<Vec<_>>()
        };
        let got = got.unwrap();
        assert!(!got.matches.is_empty(), "{pattern} finds something");
        assert_eq!(lines(&got), lines(&apart), "{pattern}");
    }
}
