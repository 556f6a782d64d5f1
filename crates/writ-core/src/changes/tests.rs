#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use super::*;
use crate::audit::{FileKind, OperationKind, Selection};
use crate::files::Provenance;
use crate::path::RepoPath;
use crate::synthesis::doubles::{MemoryStore, MemoryWorkspace};
use uuid::Uuid;

fn numbered(n: usize, changed: &[usize]) -> String {
    (1..=n)
        .map(|i| {
            if changed.contains(&i) {
                format!("line {i} changed\n")
            } else {
                format!("line {i}\n")
            }
        })
        .collect()
}

fn reviewer(caller: Option<&str>) -> Reviewer {
    Reviewer {
        request_id: Uuid::now_v7(),
        caller: caller.map(str::to_owned),
        scope: None,
        route: "test".into(),
        only: caller.map(str::to_owned),
        workspaces: None,
    }
}

/// Proposes `files` (path, base, content) as key `alice`'s change set, committed to `store`.
async fn proposed(store: &MemoryStore, files: &[(&str, Option<&str>, &str)]) -> ChangeSet {
    let by = Proposer {
        change_id: Uuid::now_v7(),
        request_id: Uuid::now_v7(),
        route: "POST /write_codebase".into(),
        caller: Some("alice".into()),
        workspace: "default".into(),
        summary: None,
        commit: None,
        ttl: DEFAULT_REVIEW_TTL,
    };
    let files = files
        .iter()
        .map(|(path, base, content)| ProposedFile {
            path: RepoPath::parse(path).unwrap(),
            kind: FileKind::Code,
            base: base.map(|b| b.as_bytes().to_vec()),
            content: content.as_bytes().to_vec(),
            provenance: Provenance {
                chosen_model: Some("model-a".into()),
                selection: Some(Selection::Arbiter),
                ..Provenance::default()
            },
        })
        .collect();
    let made = propose(by, files);
    crate::audit::AuditLog::commit(store, made.writes)
        .await
        .unwrap();
    made.change.unwrap()
}

fn changes<'a>(
    store: &'a MemoryStore,
    workspace: &'a MemoryWorkspace,
    settings: &'a ReviewSettings,
) -> Changes<'a> {
    Changes {
        store,
        workspace,
        settings,
    }
}

#[tokio::test]
async fn a_proposal_records_its_files_as_proposed_and_writes_nothing() {
    let store = MemoryStore::default();
    let base = numbered(30, &[]);
    let workspace = MemoryWorkspace::default().with_file("a.py", &base);
    let set = proposed(
        &store,
        &[
            ("a.py", Some(&base), &numbered(30, &[3, 15, 27])),
            ("b.py", None, "new\n"),
        ],
    )
    .await;

    assert_eq!(set.files.len(), 2);
    assert_eq!(set.files[0].hunks.len(), 3);
    assert_eq!(set.files[1].hunks.len(), 1);
    assert_eq!(workspace.content("a.py").as_deref(), Some(base.as_str()));
    assert_eq!(workspace.content("b.py"), None);
    let ops = store.operations.lock().unwrap().clone();
    assert_eq!(ops.len(), 2);
    assert!(ops.iter().all(|op| op.operation == OperationKind::Proposed));
    let settings = ReviewSettings::default();
    let view = changes(&store, &workspace, &settings)
        .get(&reviewer(Some("alice")), &set.id.to_string())
        .await
        .unwrap();
    assert_eq!(view.state, ChangeState::Open);
}

#[tokio::test]
async fn applying_two_hunks_of_three_writes_exactly_those_and_the_third_stays_open() {
    let store = MemoryStore::default();
    let base = numbered(30, &[]);
    let workspace = MemoryWorkspace::default().with_file("a.py", &base);
    let set = proposed(
        &store,
        &[("a.py", Some(&base), &numbered(30, &[3, 15, 27]))],
    )
    .await;
    let ids: Vec<String> = set.files[0].hunks.iter().map(|h| h.id.clone()).collect();
    let settings = ReviewSettings::default();
    let review = changes(&store, &workspace, &settings);

    let applied = review
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange {
                hunks: [("a.py".to_string(), vec![ids[0].clone(), ids[2].clone()])].into(),
                ..ApplyChange::default()
            },
        )
        .await
        .unwrap();

    assert_eq!(applied.state, ChangeState::PartiallyApplied);
    assert_eq!(applied.open_hunks, 1);
    assert_eq!(
        workspace.content("a.py").as_deref(),
        Some(numbered(30, &[3, 27]).as_str())
    );
    // The rest lands on what the first apply wrote, without a rebase.
    let rest = review
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange::default(),
        )
        .await
        .unwrap();
    assert_eq!(rest.state, ChangeState::Applied);
    assert_eq!(rest.files[0].hunks, vec![ids[1].clone()]);
    assert_eq!(
        workspace.content("a.py").as_deref(),
        Some(numbered(30, &[3, 15, 27]).as_str())
    );
    let again = review
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange::default(),
        )
        .await;
    assert!(matches!(
        again,
        Err(ChangeError::Decided {
            state: ChangeState::Applied,
            ..
        })
    ));
}

#[tokio::test]
async fn a_base_changed_since_is_refused_by_name_and_merged_with_rebase() {
    let store = MemoryStore::default();
    let base = numbered(30, &[]);
    let workspace = MemoryWorkspace::default().with_file("a.py", &format!("top\n{base}"));
    let set = proposed(&store, &[("a.py", Some(&base), &numbered(30, &[5, 25]))]).await;
    let settings = ReviewSettings::default();
    let review = changes(&store, &workspace, &settings);

    let view = review
        .get(&reviewer(Some("alice")), &set.id.to_string())
        .await
        .unwrap();
    assert_eq!(view.state, ChangeState::Stale);
    let refused = review
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange::default(),
        )
        .await;
    match refused {
        Err(ChangeError::ChangedSince(files)) => assert_eq!(files[0].path, "a.py"),
        other => panic!("expected changed_since, got {other:?}"),
    }
    assert_eq!(
        workspace.content("a.py"),
        Some(format!("top\n{base}")),
        "a refusal changes nothing"
    );

    let merged = review
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange {
                rebase: true,
                ..ApplyChange::default()
            },
        )
        .await
        .unwrap();
    assert!(merged.files[0].rebased);
    assert_eq!(
        workspace.content("a.py"),
        Some(format!("top\n{}", numbered(30, &[5, 25])))
    );
}

#[tokio::test]
async fn a_rebase_onto_lines_changed_since_names_the_conflicting_hunk_and_writes_nothing() {
    let store = MemoryStore::default();
    let base = numbered(30, &[]);
    let theirs = base.replace("line 25\n", "line 25 theirs\n");
    let workspace = MemoryWorkspace::default().with_file("a.py", &theirs);
    let set = proposed(&store, &[("a.py", Some(&base), &numbered(30, &[5, 25]))]).await;
    let settings = ReviewSettings::default();

    let refused = changes(&store, &workspace, &settings)
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange {
                rebase: true,
                ..ApplyChange::default()
            },
        )
        .await;

    match refused {
        Err(ChangeError::Conflict(files)) => {
            assert_eq!(files[0].hunks.len(), 1);
            assert_eq!(files[0].hunks[0].id, set.files[0].hunks[1].id);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(workspace.content("a.py"), Some(theirs));
}

#[tokio::test]
async fn two_applies_of_one_change_set_at_once_land_exactly_once() {
    let store = Arc::new(MemoryStore::default());
    let workspace = Arc::new(MemoryWorkspace::default());
    let set = proposed(&store, &[("new.py", None, "x = 1\n")]).await;
    let settings = ReviewSettings::default();
    let id = set.id.to_string();
    let one = {
        let (store, workspace, id) = (store.clone(), workspace.clone(), id.clone());
        let settings = settings.clone();
        tokio::spawn(async move {
            changes(&store, &workspace, &settings)
                .apply(&reviewer(Some("alice")), &id, ApplyChange::default())
                .await
        })
    };
    let two = changes(&store, &workspace, &settings)
        .apply(&reviewer(Some("alice")), &id, ApplyChange::default())
        .await;
    let one = one.await.unwrap();

    assert_eq!(
        [one.is_ok(), two.is_ok()].iter().filter(|ok| **ok).count(),
        1,
        "{one:?} / {two:?}"
    );
    let lost = if one.is_ok() { two } else { one };
    assert!(matches!(lost, Err(ChangeError::Decided { .. })), "{lost:?}");
    let written = store
        .operations
        .lock()
        .unwrap()
        .iter()
        .filter(|op| op.operation == OperationKind::Created)
        .count();
    assert_eq!(written, 1);
    assert_eq!(
        store
            .get_change(set.id)
            .await
            .unwrap()
            .unwrap()
            .decisions
            .len(),
        1
    );
}

#[tokio::test]
async fn a_rejection_is_recorded_per_file_with_its_model_and_writes_nothing() {
    let store = MemoryStore::default();
    let workspace = MemoryWorkspace::default();
    let set = proposed(
        &store,
        &[("a.py", None, "a = 1\n"), ("b.py", None, "b = 1\n")],
    )
    .await;
    let settings = ReviewSettings::default();
    let review = changes(&store, &workspace, &settings);

    let rejected = review
        .reject(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            RejectChange {
                files: vec!["b.py".into()],
                comment: Some("not this one".into()),
                ..RejectChange::default()
            },
        )
        .await
        .unwrap();

    assert_eq!(rejected.state, ChangeState::Open);
    assert_eq!(rejected.open_hunks, 1);
    let ops = store.operations.lock().unwrap().clone();
    let rejection = ops
        .iter()
        .find(|op| op.operation == OperationKind::Rejected)
        .unwrap();
    assert_eq!(rejection.filename, "b.py");
    assert_eq!(rejection.chosen_model.as_deref(), Some("model-a"));
    let review_detail = &rejection.detail.as_ref().unwrap()["review"];
    assert_eq!(review_detail["outcome"], "rejected");
    assert_eq!(review_detail["comment"], "not this one");
    assert_eq!(workspace.content("b.py"), None);
    let applied = review
        .apply(
            &reviewer(Some("alice")),
            &set.id.to_string(),
            ApplyChange::default(),
        )
        .await
        .unwrap();
    assert_eq!(applied.state, ChangeState::PartiallyApplied);
    assert_eq!(workspace.content("a.py").as_deref(), Some("a = 1\n"));
    assert_eq!(workspace.content("b.py"), None);
}

#[tokio::test]
async fn refusals_name_what_is_wrong_and_change_nothing() {
    let store = MemoryStore::default();
    let workspace = MemoryWorkspace::default();
    let set = proposed(&store, &[("a.py", None, "a = 1\n")]).await;
    let settings = ReviewSettings::default();
    let review = changes(&store, &workspace, &settings);
    let id = set.id.to_string();

    let unknown = review
        .apply(
            &reviewer(Some("alice")),
            &id,
            ApplyChange {
                hunks: [("a.py".to_string(), vec!["nope".to_string()])].into(),
                ..ApplyChange::default()
            },
        )
        .await;
    match unknown {
        Err(ChangeError::UnknownHunk { hunk, field, .. }) => {
            assert_eq!(hunk, "nope");
            assert_eq!(field, "hunks.a.py[0]");
        }
        other => panic!("expected unknown_hunk, got {other:?}"),
    }
    let not_a_file = review
        .apply(
            &reviewer(Some("alice")),
            &id,
            ApplyChange {
                files: vec!["c.py".into()],
                ..ApplyChange::default()
            },
        )
        .await;
    assert!(
        matches!(not_a_file, Err(ChangeError::Invalid { ref field, .. }) if field == "files[0]")
    );
    // Another key's change set and an unknown one answer alike.
    for (who, id) in [
        (reviewer(Some("bob")), id.clone()),
        (reviewer(Some("alice")), Uuid::now_v7().to_string()),
    ] {
        let absent = review.apply(&who, &id, ApplyChange::default()).await;
        assert!(
            matches!(absent, Err(ChangeError::NotFound(_))),
            "{absent:?}"
        );
    }
    assert_eq!(workspace.content("a.py"), None);
    assert!(
        store
            .get_change(set.id)
            .await
            .unwrap()
            .unwrap()
            .decisions
            .is_empty()
    );
}

#[tokio::test]
async fn an_expired_change_set_can_no_longer_be_applied() {
    let store = MemoryStore::default();
    let workspace = MemoryWorkspace::default();
    let by = Proposer {
        change_id: Uuid::now_v7(),
        request_id: Uuid::now_v7(),
        route: "POST /edits".into(),
        caller: None,
        workspace: "default".into(),
        summary: None,
        commit: None,
        ttl: std::time::Duration::ZERO,
    };
    let made = propose(
        by,
        vec![ProposedFile {
            path: RepoPath::parse("a.py").unwrap(),
            kind: FileKind::Direct,
            base: None,
            content: b"a\n".to_vec(),
            provenance: Provenance::default(),
        }],
    );
    let id = made.change.as_ref().unwrap().id.to_string();
    crate::audit::AuditLog::commit(&store, made.writes)
        .await
        .unwrap();
    let settings = ReviewSettings::default();

    let gone = changes(&store, &workspace, &settings)
        .apply(&reviewer(None), &id, ApplyChange::default())
        .await;

    assert!(matches!(gone, Err(ChangeError::Expired { .. })), "{gone:?}");
    assert_eq!(workspace.content("a.py"), None);
}
