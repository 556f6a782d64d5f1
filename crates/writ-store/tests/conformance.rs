//! The audit store conformance suite: one set of behaviours every [`AuditStore`] must have, run
//! against PostgreSQL and SQLite alike, plus the few checks that only make sense per backend
//! (connection settings, query plans) and the connection errors of [`writ_store::connect`].
//!
//! Each behaviour is a generic `async fn(&dyn AuditStore)`; `conformance_suite!` turns it into a
//! `#[tokio::test]` per backend, each on a fresh database (a new PostgreSQL database per test, a new
//! SQLite file in a temp dir). PostgreSQL must be reachable: these tests fail, never skip, without
//! it (see `writ_store::testing`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use tempfile::TempDir;
use uuid::Uuid;
use writ_core::audit::{
    AuditWrite, CandidateRecord, Cursor, FileKind, NewRequest, Operation, OperationFilter,
    OperationKind, OperationOutcome, OperationStatus, RequestStatus,
};
use writ_core::budgets::{Spend, SpendEntry, SpendHolder};
use writ_core::files::WriteMode;
use writ_core::sessions::{ChunkAppend, SessionState, SessionTransition, WriteSession};
use writ_core::workspace_registry::{WorkspaceKind, WorkspaceName, WorkspaceRecord};
use writ_core::{AuditLog, AuditStore, StoreError};
use writ_store::testing::{fresh_postgres_url, fresh_sqlite_url};
use writ_store::{Dialect, PgStore, SqlStore, SqliteStore};

// ---------------------------------------------------------------------------------------------
// Harness

/// A store on a database of its own, and whatever must outlive it.
struct Fresh {
    store: Arc<dyn AuditStore>,
    url: String,
    /// Holds the SQLite file's directory until the test ends.
    _dir: Option<TempDir>,
}

async fn fresh_postgres() -> Fresh {
    let url = fresh_postgres_url().await;
    Fresh {
        store: writ_store::connect(&url).await.unwrap(),
        url,
        _dir: None,
    }
}

async fn fresh_sqlite() -> Fresh {
    let dir = tempfile::tempdir().unwrap();
    let url = fresh_sqlite_url(dir.path());
    Fresh {
        store: writ_store::connect(&url).await.unwrap(),
        url,
        _dir: Some(dir),
    }
}

/// SHA-384 of migration 0002 as the builds of 2026-11-22 applied it, before its comment was
/// reworded to speak of the product alone, per backend.
const FIRST_0002_POSTGRES: &str = "0c0f9f7f485bb7c064852d4a774d980e00e0232b41b4efa4459cb53829b30cb0631f0f786834151e5a85918532fd39f8";
const FIRST_0002_SQLITE: &str = "5fdce9c296aef719a1cb9eefb165881c0a075d11eba869248fe43a1247e92d59686306e76fc19ee32c5fe1ebfc8d0355";

/// Makes the database look as if one of those builds had applied migration 0002.
async fn stamp_with_the_first_text(fresh: &Fresh) {
    if fresh.url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(&fresh.url).await.unwrap();
        sqlx::query("UPDATE _sqlx_migrations SET checksum = ? WHERE version = 2")
            .bind(hex::decode(FIRST_0002_SQLITE).unwrap())
            .execute(&pool)
            .await
            .unwrap();
    } else {
        let pool = sqlx::PgPool::connect(&fresh.url).await.unwrap();
        sqlx::query("UPDATE _sqlx_migrations SET checksum = $1 WHERE version = 2")
            .bind(hex::decode(FIRST_0002_POSTGRES).unwrap())
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// Inserts a key with the statement writ used before migration 0006, leaving `scopes` NULL as
/// the migration leaves every key issued before it.
async fn insert_key_as_before_scopes(fresh: &Fresh, id: &str) {
    let hash = "a".repeat(64);
    if fresh.url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(&fresh.url).await.unwrap();
        sqlx::query("INSERT INTO api_keys (id, name, secret_sha256, created_at, revoked_at) VALUES (?, 'old', ?, 0, NULL)")
            .bind(id)
            .bind(&hash)
            .execute(&pool)
            .await
            .unwrap();
    } else {
        let pool = sqlx::PgPool::connect(&fresh.url).await.unwrap();
        sqlx::query("INSERT INTO api_keys (id, name, secret_sha256, created_at, revoked_at) VALUES ($1, 'old', $2, now(), NULL)")
            .bind(id)
            .bind(&hash)
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// The recorded checksum of 0002 is the SHA-384 of the file as it is now.
async fn checksum_of_version_2_is_current(fresh: &Fresh) {
    use sha2::Digest as _;
    let (dir, checksum): (&str, Vec<u8>) = if fresh.url.starts_with("sqlite") {
        let pool = sqlx::SqlitePool::connect(&fresh.url).await.unwrap();
        let row: (Vec<u8>,) =
            sqlx::query_as("SELECT checksum FROM _sqlx_migrations WHERE version = 2")
                .fetch_one(&pool)
                .await
                .unwrap();
        ("sqlite", row.0)
    } else {
        let pool = sqlx::PgPool::connect(&fresh.url).await.unwrap();
        let row: (Vec<u8>,) =
            sqlx::query_as("SELECT checksum FROM _sqlx_migrations WHERE version = 2")
                .fetch_one(&pool)
                .await
                .unwrap();
        ("postgres", row.0)
    };
    let text = std::fs::read(format!(
        "{}/../../migrations/{dir}/0002_api_keys.sql",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    assert_eq!(
        hex::encode(checksum),
        hex::encode(sha2::Sha384::digest(&text))
    );
}

/// Generates `mod $backend` with one `#[tokio::test]` per behaviour. `unmigrated` behaviours get
/// an empty database; `migrated` ones get the schema applied.
macro_rules! conformance_suite {
    ($backend:ident, $name:literal, $open:path) => {
        mod $backend {
            #[tokio::test]
            async fn a_database_migrated_with_a_reworded_migration_still_starts() {
                let fresh = $open().await;
                fresh.store.migrate().await.unwrap();
                super::stamp_with_the_first_text(&fresh).await;
                assert!(fresh.store.is_migrated().await.unwrap());
                fresh.store.migrate().await.unwrap();
                assert!(fresh.store.is_migrated().await.unwrap());
                super::checksum_of_version_2_is_current(&fresh).await;
            }

            #[tokio::test]
            async fn a_key_issued_before_scopes_keeps_read_write_and_run() {
                let fresh = $open().await;
                fresh.store.migrate().await.unwrap();
                super::insert_key_as_before_scopes(&fresh, "0123456789ab").await;
                let found = fresh.store.find_key("0123456789ab").await.unwrap().unwrap();
                assert_eq!(found.scopes, writ_core::keys::Scopes::LEGACY);
                assert_eq!(found.scopes.to_string(), "read,write,run");
                assert_eq!(fresh.store.list_keys().await.unwrap(), vec![found]);
            }

            #[tokio::test]
            async fn spend_recorded_before_the_ledger_is_counted_in_it_from_the_previous_month_on() {
                use writ_core::budgets::SpendHolder;
                let fresh = $open().await;
                fresh.store.migrate().await.unwrap();
                let store = &*fresh.store;
                let now = super::now();
                super::spent_before_the_ledger(store, "team", "key-a", now).await;
                super::spent_before_the_ledger(store, "team", "key-b", now).await;
                super::spent_before_the_ledger(store, "team", "key-a", now - chrono::Duration::days(70)).await;

                super::fill_the_ledger_from_the_operations(&fresh).await;

                let team = store.spent(SpendHolder::Workspace("team"), now).await.unwrap();
                // Two operations, each with two candidates (one reporting no usage) and a call.
                assert_eq!((team.calls, team.tokens), (6, 2 * (3812 + 120)));
                assert!((team.cost - 2.0 * 0.0133).abs() < 1e-9, "{team:?}");
                let long_ago = now - chrono::Duration::days(100);
                let a = store.spent(SpendHolder::Key("key-a"), long_ago).await.unwrap();
                assert_eq!(a.tokens, 3812 + 120, "older than the previous month: not read");
            }

            #[tokio::test]
            async fn the_backend_names_itself_and_answers_a_ping() {
                let fresh = $open().await;
                assert_eq!(fresh.store.backend(), $name);
                fresh.store.ping().await.unwrap();
            }

            conformance_suite!(@unmigrated $open;
                migrate_is_idempotent_and_is_migrated_flips_from_false_to_true,
            );

            conformance_suite!(@migrated $open;
                a_request_round_trips_through_insert_finish_and_get,
                a_commit_writes_all_of_its_records_or_none,
                a_batch_closing_commit_completes_every_file_or_none,
                concurrent_commits_share_transactions_and_a_refused_one_fails_alone,
                an_operation_carries_its_requests_caller_for_the_listing,
                requests_operations_and_jobs_carry_their_workspace_and_list_by_it,
                recent_operations_are_the_callers_newest_as_the_listing_has_them,
                finishing_an_unknown_request_is_an_error,
                a_duplicate_idempotency_key_is_a_conflict_even_without_a_caller,
                requests_without_an_idempotency_key_never_conflict,
                a_request_is_found_by_its_caller_and_idempotency_key,
                an_operation_is_stored_with_its_content_bytes_and_candidates,
                an_operation_without_content_reads_back_with_none,
                an_operation_without_its_optional_fields_reads_back_with_nones,
                a_duplicate_operation_id_is_a_conflict_and_leaves_the_first_intact,
                completing_an_operation_records_its_outcome,
                completing_an_unknown_operation_is_an_error,
                pending_operations_lists_only_pending_ones_oldest_first,
                listing_is_newest_first_and_pages_with_a_cursor,
                a_page_that_ends_exactly_at_the_last_row_has_no_next_cursor,
                listing_filters_by_request_id,
                listing_filters_by_filename,
                listing_filters_by_status,
                listing_filters_by_model,
                listing_filters_by_the_caller_of_the_request,
                listing_since_is_inclusive_and_until_is_exclusive,
                listing_combines_filters_with_and_and_pages_within_them,
                an_unparseable_cursor_is_rejected,
                a_job_moves_from_queued_to_running_to_done_and_keeps_its_response,
                a_job_without_an_answer_of_its_own_gives_its_requests,
                a_finished_job_is_not_ended_twice,
                stale_jobs_are_the_unfinished_ones_whose_heartbeat_stopped,
                a_lapsed_lease_is_claimed_once_and_its_old_owner_can_no_longer_renew_it,
                a_released_lease_is_claimable_at_once_and_only_the_owner_can_release_it,
                job_events_replay_after_a_sequence_number_in_order,
                a_burst_of_many_jobs_events_reads_back_field_for_field,
                heartbeats_and_finishes_are_stamped_with_the_process_clock,
                jobs_list_newest_first_within_the_limit_and_keep_is_async,
                an_api_key_round_trips_and_is_found_by_id,
                revoking_a_key_keeps_it_listed_with_the_first_revocation_time,
                a_duplicate_api_key_id_is_a_conflict,
                a_write_session_round_trips_and_its_chunks_read_back_in_order,
                a_chunk_appended_out_of_turn_or_after_the_session_moved_on_is_refused,
                a_session_changes_state_once_and_can_replace_or_drop_its_content,
                a_session_change_and_its_audit_records_land_together_or_not_at_all,
                open_sessions_are_counted_per_caller_and_abandoned_ones_listed_oldest_first,
                a_workspace_budget_round_trips_and_only_a_known_workspace_takes_one,
                the_ledger_adds_each_call_to_its_key_and_workspace_for_the_day_it_was_made,
                concurrent_calls_of_one_key_are_each_counted,
                a_workspace_with_a_queued_or_running_job_is_not_deleted_and_its_budget_goes_with_it,
                a_job_is_recorded_only_in_a_stored_workspace_or_default,
                a_workspace_round_trips_and_workspaces_list_by_name,
                a_taken_workspace_name_is_a_conflict_and_deleting_frees_it,
                a_key_bound_to_workspaces_reads_back_bound_and_an_unbound_one_may_use_all,
                a_requests_commit_reads_back_and_a_later_record_replaces_it,
                a_change_set_round_trips_with_its_files_contents_and_decisions,
                of_two_decisions_on_one_version_one_lands_and_the_other_changes_nothing,
                a_withdrawn_decision_leaves_its_number_and_its_event_free,
                change_sets_list_newest_first_by_workspace_caller_and_openness,
                claims_are_listed_per_repository_while_live_and_expire_with_their_ttl,
                a_claim_is_released_only_by_its_workspace,
                claims_on_paths_are_the_other_workspaces_ones_that_cover_them,
                deleting_a_workspace_releases_its_claims,
            );
        }
    };
    (@unmigrated $open:path; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let fresh = $open().await;
                super::$test(&*fresh.store).await;
            }
        )*
    };
    (@migrated $open:path; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let fresh = $open().await;
                fresh.store.migrate().await.unwrap();
                super::$test(&*fresh.store).await;
            }
        )*
    };
}

conformance_suite!(postgres, "postgres", super::fresh_postgres);
conformance_suite!(sqlite, "sqlite", super::fresh_sqlite);

// ---------------------------------------------------------------------------------------------
// Commits (group commit)

async fn a_commit_writes_all_of_its_records_or_none(store: &dyn AuditStore) {
    let req = new_request(None, None);
    let job = writ_core::jobs::NewJob {
        id: req.id,
        created_at: now(),
        is_async: false,
        files: vec!["a.py".into()],
        ..Default::default()
    };
    let op = operation(req.id, "a.py");
    // The last write refers to a request that does not exist: the whole unit is refused.
    let err = store
        .commit(vec![
            AuditWrite::InsertRequest(req.clone()),
            AuditWrite::InsertJob {
                job: job.clone(),
                status: writ_core::jobs::JobStatus::Running,
            },
            AuditWrite::InsertOperation {
                operation: op.clone(),
                content: Some(b"x".to_vec()),
            },
            AuditWrite::FinishRequest {
                id: Uuid::now_v7(),
                status: RequestStatus::Success,
                duration_ms: 1,
                response: None,
            },
        ])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no request"), "{err}");
    assert!(store.get_request(req.id).await.unwrap().is_none());
    assert!(store.get_job(req.id).await.unwrap().is_none());
    assert!(store.get_operation(op.id).await.unwrap().is_none());

    store.commit(batch_start(&req, job)).await.unwrap();
    assert_eq!(
        store.get_job(req.id).await.unwrap().unwrap().status,
        writ_core::jobs::JobStatus::Running
    );
    store
        .commit(vec![
            AuditWrite::FinishRequest {
                id: req.id,
                status: RequestStatus::Success,
                duration_ms: 7,
                response: Some(json!({"status": "success"})),
            },
            AuditWrite::FinishJob {
                id: req.id,
                status: writ_core::jobs::JobStatus::Done,
                batch_status: Some("success".into()),
                response: Some(json!({"status": "success"})),
                error: None,
            },
        ])
        .await
        .unwrap();
    let got = store.get_request(req.id).await.unwrap().unwrap();
    assert_eq!(got.status, RequestStatus::Success);
    assert_eq!(got.response, Some(json!({"status": "success"})));
    let job = store.get_job(req.id).await.unwrap().unwrap();
    assert_eq!(job.status, writ_core::jobs::JobStatus::Done);
    assert_eq!(job.response, Some(json!({"status": "success"})));
    // Finishing a job that has ended already changes nothing and refuses nothing.
    store
        .commit(vec![AuditWrite::FinishJob {
            id: req.id,
            status: writ_core::jobs::JobStatus::Failed,
            batch_status: None,
            response: None,
            error: Some("late".into()),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.get_job(req.id).await.unwrap().unwrap().status,
        writ_core::jobs::JobStatus::Done
    );
}

/// A batch's first commit: its request and its job, running.
fn batch_start(req: &NewRequest, job: writ_core::jobs::NewJob) -> Vec<AuditWrite> {
    vec![
        AuditWrite::InsertRequest(req.clone()),
        AuditWrite::InsertJob {
            job,
            status: writ_core::jobs::JobStatus::Running,
        },
    ]
}

/// A batch's closing commit: its files' completions, its request's closing and its job's, which
/// the store may send as one statement. One completion naming an operation that does not exist
/// refuses them all.
async fn a_batch_closing_commit_completes_every_file_or_none(store: &dyn AuditStore) {
    let req = new_request(Some("caller-a"), None);
    let job = writ_core::jobs::NewJob {
        id: req.id,
        created_at: now(),
        is_async: false,
        files: vec!["a.py".into(), "b.py".into(), "c.py".into()],
        ..Default::default()
    };
    store.commit(batch_start(&req, job)).await.unwrap();
    let ops: Vec<Operation> = ["a.py", "b.py", "c.py"]
        .iter()
        .map(|f| operation(req.id, f))
        .collect();
    store
        .commit(
            ops.iter()
                .map(|op| AuditWrite::InsertOperation {
                    operation: op.clone(),
                    content: Some(op.filename.clone().into_bytes()),
                })
                .collect(),
        )
        .await
        .unwrap();
    let outcome = |ms: i64| OperationOutcome {
        status: OperationStatus::Succeeded,
        operation: OperationKind::Created,
        error: None,
        finished_at: now(),
        duration_ms: Some(ms),
    };
    let closing = |ids: Vec<Uuid>| {
        let mut writes: Vec<AuditWrite> = ids
            .into_iter()
            .enumerate()
            .map(|(i, id)| AuditWrite::CompleteOperation {
                id,
                outcome: outcome(10 + i as i64),
            })
            .collect();
        writes.push(AuditWrite::FinishRequest {
            id: req.id,
            status: RequestStatus::Success,
            duration_ms: 9,
            response: Some(json!({"status": "success"})),
        });
        writes.push(AuditWrite::FinishJob {
            id: req.id,
            status: writ_core::jobs::JobStatus::Done,
            batch_status: Some("success".into()),
            response: Some(json!({"status": "success"})),
            error: None,
        });
        writes
    };

    let unknown = Uuid::now_v7();
    let err = store
        .commit(closing(vec![ops[0].id, unknown, ops[2].id]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no operation"), "{err}");
    for op in &ops {
        let (stored, _) = store.get_operation(op.id).await.unwrap().unwrap();
        assert_eq!(stored.status, OperationStatus::Pending, "{}", op.filename);
    }
    assert_eq!(
        store.get_request(req.id).await.unwrap().unwrap().status,
        RequestStatus::Running
    );
    assert_eq!(
        store.get_job(req.id).await.unwrap().unwrap().status,
        writ_core::jobs::JobStatus::Running
    );

    store
        .commit(closing(ops.iter().map(|op| op.id).collect()))
        .await
        .unwrap();
    for (i, op) in ops.iter().enumerate() {
        let (stored, content) = store.get_operation(op.id).await.unwrap().unwrap();
        assert_eq!(stored.status, OperationStatus::Succeeded);
        assert_eq!(stored.duration_ms, Some(10 + i as i64));
        assert_eq!(content.as_deref(), Some(op.filename.as_bytes()));
    }
    let listed = store
        .list_operations(
            &OperationFilter {
                caller: Some(Some("caller-a".into())),
                ..OperationFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        listed.operations.len(),
        3,
        "each row carries its request's caller"
    );
    let got = store.get_request(req.id).await.unwrap().unwrap();
    assert_eq!(got.status, RequestStatus::Success);
    assert_eq!(got.response, Some(json!({"status": "success"})));
    assert_eq!(
        store.get_job(req.id).await.unwrap().unwrap().status,
        writ_core::jobs::JobStatus::Done
    );
}

async fn concurrent_commits_share_transactions_and_a_refused_one_fails_alone(
    store: &dyn AuditStore,
) {
    let taken = new_request(None, Some("same-key"));
    store.insert_request(&taken).await.unwrap();
    // Queued together, so they share a transaction; the replayed key spoils it, and the others
    // must still land, each on its own.
    let mut units = Vec::new();
    let mut good = Vec::new();
    for i in 0..20 {
        let req = if i == 7 {
            new_request(None, Some("same-key"))
        } else {
            new_request(None, None)
        };
        let op = operation(req.id, &format!("f{i}.py"));
        if i != 7 {
            good.push((req.id, op.id));
        }
        units.push(vec![
            AuditWrite::InsertRequest(req),
            AuditWrite::InsertOperation {
                operation: op,
                content: Some(format!("content {i}").into_bytes()),
            },
        ]);
    }
    let outcomes = futures::future::join_all(units.into_iter().map(|u| store.commit(u))).await;
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 7 {
            assert!(
                matches!(outcome, Err(StoreError::Conflict(_))),
                "{outcome:?}"
            );
        } else {
            assert!(outcome.is_ok(), "unit {i}: {outcome:?}");
        }
    }
    for (request_id, op_id) in good {
        assert!(store.get_request(request_id).await.unwrap().is_some());
        let (_, content) = store.get_operation(op_id).await.unwrap().unwrap();
        assert!(content.is_some());
    }
}

async fn an_operation_carries_its_requests_caller_for_the_listing(store: &dyn AuditStore) {
    let mine = new_request(Some("key-a"), None);
    let theirs = new_request(Some("key-b"), None);
    let anonymous = new_request(None, None);
    let mut ids = Vec::new();
    for req in [&mine, &theirs, &anonymous] {
        let op = operation(req.id, "same.py");
        ids.push(op.id);
        // Request and operation in one commit, the request first: the operation takes its
        // caller from the request written just before it.
        store
            .commit(vec![
                AuditWrite::InsertRequest(req.clone()),
                AuditWrite::InsertOperation {
                    operation: op,
                    content: None,
                },
            ])
            .await
            .unwrap();
    }
    let of = |caller: Option<&str>| OperationFilter {
        caller: Some(caller.map(str::to_string)),
        ..OperationFilter::default()
    };
    assert_eq!(list_all(store, &of(Some("key-a"))).await, vec![ids[0]]);
    assert_eq!(list_all(store, &of(Some("key-b"))).await, vec![ids[1]]);
    assert_eq!(list_all(store, &of(None)).await, vec![ids[2]]);
}

/// Every record says which workspace it was made in: an operation its request's (whatever the
/// operation said), so the listings of operations and jobs filter by workspace and a pending
/// write names the workspace to settle it in.
async fn requests_operations_and_jobs_carry_their_workspace_and_list_by_it(store: &dyn AuditStore) {
    use writ_core::jobs::{JobFilter, JobStatus, NewJob};
    let mut ids = Vec::new();
    // A job is recorded only in a workspace that is stored.
    for name in ["task-a", "task-b"] {
        store
            .create_workspace(&workspace_record(name, WorkspaceKind::Empty))
            .await
            .unwrap();
    }
    for workspace in ["task-a", "task-b", "default"] {
        let mut req = new_request(Some("key-a"), None);
        req.workspace = workspace.into();
        let op = operation(req.id, "same.py");
        assert_eq!(
            op.workspace, "default",
            "the operation itself says nothing useful"
        );
        ids.push((req.id, op.id));
        store
            .commit(vec![
                AuditWrite::InsertRequest(req.clone()),
                AuditWrite::InsertOperation {
                    operation: op,
                    content: Some(b"x".to_vec()),
                },
                AuditWrite::InsertJob {
                    job: NewJob {
                        id: req.id,
                        created_at: now(),
                        workspace: workspace.into(),
                        ..Default::default()
                    },
                    status: JobStatus::Running,
                },
            ])
            .await
            .unwrap();
    }
    let request = store.get_request(ids[0].0).await.unwrap().unwrap();
    assert_eq!(request.workspace, "task-a");
    let (op, _) = store.get_operation(ids[1].1).await.unwrap().unwrap();
    assert_eq!(op.workspace, "task-b");
    let pending: Vec<(Uuid, String)> = store
        .pending_operations()
        .await
        .unwrap()
        .into_iter()
        .map(|op| (op.id, op.workspace))
        .collect();
    assert_eq!(
        pending,
        vec![
            (ids[0].1, "task-a".to_string()),
            (ids[1].1, "task-b".to_string()),
            (ids[2].1, "default".to_string())
        ]
    );

    let within = |names: &[&str]| OperationFilter {
        workspaces: Some(names.iter().map(|n| n.to_string()).collect()),
        ..OperationFilter::default()
    };
    assert_eq!(list_all(store, &within(&["task-a"])).await, vec![ids[0].1]);
    assert_eq!(
        list_all(store, &within(&["default", "task-b"])).await,
        vec![ids[2].1, ids[1].1]
    );
    assert_eq!(list_all(store, &within(&[])).await, Vec::<Uuid>::new());
    assert_eq!(list_all(store, &OperationFilter::default()).await.len(), 3);

    let jobs = |names: Option<&[&str]>, unfinished: bool| {
        let filter = JobFilter {
            workspaces: names.map(|n| n.iter().map(|n| n.to_string()).collect()),
            unfinished,
            ..JobFilter::default()
        };
        async move {
            store
                .list_jobs(&filter, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|j| (j.id, j.workspace))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        jobs(Some(&["task-b"]), false).await,
        vec![(ids[1].0, "task-b".to_string())]
    );
    assert_eq!(jobs(None, false).await.len(), 3);
    assert_eq!(jobs(Some(&[]), false).await, vec![]);
    store
        .finish_job(ids[0].0, JobStatus::Done, Some("success"), None, None)
        .await
        .unwrap();
    assert_eq!(jobs(Some(&["task-a"]), true).await, vec![]);
    assert_eq!(
        jobs(Some(&["task-a", "task-b"]), true).await,
        vec![(ids[1].0, "task-b".to_string())]
    );
    let of_key = JobFilter {
        caller: Some("key-b".into()),
        ..JobFilter::default()
    };
    assert!(store.list_jobs(&of_key, 10).await.unwrap().is_empty());
}

/// The prompts' context: the caller's newest operations, newest first, what the full listing
/// says of them, and no one else's.
async fn recent_operations_are_the_callers_newest_as_the_listing_has_them(store: &dyn AuditStore) {
    let mine = new_request(Some("key-a"), None);
    let theirs = new_request(Some("key-b"), None);
    for req in [&mine, &theirs] {
        store.insert_request(req).await.unwrap();
    }
    for i in 0..4 {
        let mut op = operation(mine.id, &format!("src/mine_{i}.py"));
        op.created_at = now() + chrono::Duration::seconds(i);
        op.operation = if i % 2 == 0 {
            OperationKind::Created
        } else {
            OperationKind::Updated
        };
        op.chosen_model = (i != 2).then(|| format!("model-{i}"));
        store.insert_operation(&op, None).await.unwrap();
        store
            .insert_operation(&operation(theirs.id, "src/theirs.py"), None)
            .await
            .unwrap();
    }

    let recent = store.recent_operations(Some("key-a"), 3).await.unwrap();
    let listed = store
        .list_operations(
            &OperationFilter {
                caller: Some(Some("key-a".into())),
                ..OperationFilter::default()
            },
            None,
            3,
        )
        .await
        .unwrap()
        .operations;
    let summary: Vec<_> = listed
        .iter()
        .map(|op| {
            (
                op.created_at,
                op.filename.clone(),
                op.operation,
                op.chosen_model.clone(),
            )
        })
        .collect();
    assert_eq!(
        recent
            .iter()
            .map(|r| (
                r.created_at,
                r.filename.clone(),
                r.operation,
                r.chosen_model.clone()
            ))
            .collect::<Vec<_>>(),
        summary
    );
    assert_eq!(
        recent
            .iter()
            .map(|r| r.filename.as_str())
            .collect::<Vec<_>>(),
        ["src/mine_3.py", "src/mine_2.py", "src/mine_1.py"]
    );
    assert_eq!(recent[1].chosen_model, None);
    assert!(store.recent_operations(None, 10).await.unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Fixtures

/// Now, at the microsecond precision both backends keep, so records compare equal after a round trip.
fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap()
}

fn new_request(caller: Option<&str>, idempotency_key: Option<&str>) -> NewRequest {
    NewRequest {
        id: Uuid::now_v7(),
        received_at: now(),
        route: "POST /write_codebase".into(),
        caller: caller.map(Into::into),
        scope: caller.map(|_| writ_core::keys::Scope::Write),
        idempotency_key: idempotency_key.map(Into::into),
        body_sha256: Some("ab".repeat(32)),
        workspace: "default".into(),
    }
}

fn candidates() -> Vec<CandidateRecord> {
    vec![
        CandidateRecord {
            model: "model-a".into(),
            ok: true,
            latency_ms: 1234,
            parsed: Some(true),
            prompt_tokens: Some(812),
            completion_tokens: Some(3000),
            cached_tokens: Some(512),
            cost: Some(0.0123),
            error_class: None,
            error: None,
            round: None,
            validation: Some(writ_core::audit::ValidationRecord {
                passed: true,
                command: "pytest".into(),
                exit_code: Some(0),
                timed_out: false,
                duration_ms: 812,
                output_tail: "1 passed\n".into(),
                diagnostics: None,
            }),
            generated_checks: Some(writ_core::audit::GeneratedCheckRecord {
                passed: 3,
                failed: vec![".writ-checks/test_a_0.py::test_slip".into()],
                group: 0,
                cluster: Some(1),
                duration_ms: 420,
            }),
            answer_form: Some(writ_checks::AnswerForm::Edits),
            edit_fallback: Some(writ_checks::edit::Fallback::Whitespace),
            removed_definitions: Vec::new(),
            edit_retry_error: Some("SEARCH block 1: the text to replace was not found".into()),
        },
        CandidateRecord {
            model: "model-b".into(),
            ok: false,
            latency_ms: 30_000,
            parsed: None,
            error_class: Some(writ_core::model::ErrorClass::RateLimited),
            error: Some("429 from upstream".into()),
            round: Some(1),
            removed_definitions: vec!["Stack.pop".into()],
            ..CandidateRecord::default()
        },
    ]
}

fn operation(request_id: Uuid, filename: &str) -> Operation {
    Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: now(),
        finished_at: None,
        filename: filename.into(),
        kind: FileKind::Code,
        operation: OperationKind::Created,
        status: OperationStatus::Pending,
        chosen_model: Some("model-a".into()),
        selection: Some(writ_core::audit::Selection::Arbiter),
        arbiter_reason: Some("parses and handles the edge case".into()),
        candidates: candidates(),
        previous_sha256: None,
        sha256: Some("cd".repeat(32)),
        bytes: Some(5),
        error: None,
        duration_ms: None,
        detail: Some(json!({"note": "kept as given"})),
        workspace: "default".into(),
    }
}

/// Inserts `count` operations of one request, oldest first, and returns them in insertion order.
async fn insert_operations(
    store: &dyn AuditStore,
    count: usize,
    shape: impl Fn(usize, &mut Operation),
) -> Vec<Operation> {
    let request_id = Uuid::now_v7();
    let mut inserted = Vec::with_capacity(count);
    for i in 0..count {
        let mut op = operation(request_id, &format!("src/file_{i}.py"));
        shape(i, &mut op);
        store.insert_operation(&op, None).await.unwrap();
        inserted.push(op);
    }
    inserted
}

fn ids(ops: &[Operation]) -> Vec<Uuid> {
    ops.iter().map(|op| op.id).collect()
}

/// The ids of `ops` newest first, as the listing returns them.
fn newest_first(ops: &[&Operation]) -> Vec<Uuid> {
    ops.iter().rev().map(|op| op.id).collect()
}

/// Every operation the filter lists, following cursors to the end with a small page size.
async fn list_all(store: &dyn AuditStore, filter: &OperationFilter) -> Vec<Uuid> {
    let mut listed = Vec::new();
    let mut cursor: Option<Cursor> = None;
    loop {
        let page = store
            .list_operations(filter, cursor.as_ref(), 3)
            .await
            .unwrap();
        listed.extend(ids(&page.operations));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return listed,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Migrations

async fn migrate_is_idempotent_and_is_migrated_flips_from_false_to_true(store: &dyn AuditStore) {
    assert!(!store.is_migrated().await.unwrap());
    store.migrate().await.unwrap();
    assert!(store.is_migrated().await.unwrap());
    store.migrate().await.unwrap();
    assert!(store.is_migrated().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// Requests

async fn a_request_round_trips_through_insert_finish_and_get(store: &dyn AuditStore) {
    let req = new_request(Some("key-1"), Some("idem-1"));
    store.insert_request(&req).await.unwrap();

    let running = store.get_request(req.id).await.unwrap().unwrap();
    assert_eq!(running.id, req.id);
    assert_eq!(running.received_at, req.received_at);
    assert_eq!(running.route, req.route);
    assert_eq!(running.caller, req.caller);
    assert_eq!(running.scope, Some(writ_core::keys::Scope::Write));
    assert_eq!(running.idempotency_key, req.idempotency_key);
    assert_eq!(running.body_sha256, req.body_sha256);
    assert_eq!(running.status, RequestStatus::Running);
    assert_eq!(
        (running.finished_at, running.duration_ms, running.response),
        (None, None, None)
    );

    let response =
        json!({"results": [{"filename": "a.py", "ok": true, "cost": 0.5}], "note": "ünïcode"});
    store
        .finish_request(req.id, RequestStatus::PartialSuccess, 842, Some(&response))
        .await
        .unwrap();

    let finished = store.get_request(req.id).await.unwrap().unwrap();
    assert_eq!(finished.status, RequestStatus::PartialSuccess);
    assert_eq!(finished.duration_ms, Some(842));
    assert_eq!(finished.response, Some(response));
    assert!(finished.finished_at.unwrap() >= req.received_at);

    assert_eq!(store.get_request(Uuid::now_v7()).await.unwrap(), None);
}

async fn finishing_an_unknown_request_is_an_error(store: &dyn AuditStore) {
    let err = store
        .finish_request(Uuid::now_v7(), RequestStatus::Success, 1, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Other(message) if message.contains("no request")),
        "{err:?}"
    );
}

async fn a_duplicate_idempotency_key_is_a_conflict_even_without_a_caller(store: &dyn AuditStore) {
    store
        .insert_request(&new_request(Some("key-1"), Some("idem")))
        .await
        .unwrap();
    let err = store
        .insert_request(&new_request(Some("key-1"), Some("idem")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");

    // The same key is another caller's to use.
    store
        .insert_request(&new_request(Some("key-2"), Some("idem")))
        .await
        .unwrap();

    store
        .insert_request(&new_request(None, Some("idem")))
        .await
        .unwrap();
    let err = store
        .insert_request(&new_request(None, Some("idem")))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
}

async fn requests_without_an_idempotency_key_never_conflict(store: &dyn AuditStore) {
    for caller in [None, None, Some("key-1"), Some("key-1")] {
        store
            .insert_request(&new_request(caller, None))
            .await
            .unwrap();
    }
}

async fn a_request_is_found_by_its_caller_and_idempotency_key(store: &dyn AuditStore) {
    let with_caller = new_request(Some("key-1"), Some("idem"));
    let without_caller = new_request(None, Some("idem"));
    store.insert_request(&with_caller).await.unwrap();
    store.insert_request(&without_caller).await.unwrap();

    let found = store
        .find_request_by_idempotency_key(Some("key-1"), "idem")
        .await
        .unwrap();
    assert_eq!(found.map(|r| r.id), Some(with_caller.id));
    let found = store
        .find_request_by_idempotency_key(None, "idem")
        .await
        .unwrap();
    assert_eq!(found.map(|r| r.id), Some(without_caller.id));

    assert_eq!(
        store
            .find_request_by_idempotency_key(Some("key-2"), "idem")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .find_request_by_idempotency_key(Some("key-1"), "other")
            .await
            .unwrap(),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Operations

async fn an_operation_is_stored_with_its_content_bytes_and_candidates(store: &dyn AuditStore) {
    let req = new_request(None, None);
    store.insert_request(&req).await.unwrap();
    let mut op = operation(req.id, "src/main.py");
    op.previous_sha256 = Some("ef".repeat(32));
    // Not UTF-8, with a NUL: content is bytes, not text.
    let content: &[u8] = &[b'p', 0x00, 0xff, 0xfe, b'\n'];

    store.insert_operation(&op, Some(content)).await.unwrap();

    let (stored, stored_content) = store.get_operation(op.id).await.unwrap().unwrap();
    assert_eq!(stored, op);
    assert_eq!(stored_content.as_deref(), Some(content));
    assert_eq!(store.get_operation(Uuid::now_v7()).await.unwrap(), None);
}

async fn an_operation_without_content_reads_back_with_none(store: &dyn AuditStore) {
    let mut op = operation(Uuid::now_v7(), "src/failed.py");
    op.status = OperationStatus::Failed;
    op.operation = OperationKind::Failed;
    op.chosen_model = None;
    op.candidates = Vec::new();
    op.error = Some("every candidate failed".into());

    store.insert_operation(&op, None).await.unwrap();

    let (stored, content) = store.get_operation(op.id).await.unwrap().unwrap();
    assert_eq!(stored, op);
    assert_eq!(content, None);
}

async fn an_operation_without_its_optional_fields_reads_back_with_nones(store: &dyn AuditStore) {
    let mut op = operation(Uuid::now_v7(), "src/direct.py");
    op.chosen_model = None;
    op.selection = None;
    op.arbiter_reason = None;
    op.sha256 = None;
    op.bytes = None;
    op.detail = None;
    op.finished_at = Some(now());
    op.duration_ms = Some(12);

    store.insert_operation(&op, None).await.unwrap();

    let (stored, _) = store.get_operation(op.id).await.unwrap().unwrap();
    assert_eq!(stored, op);
    let listed = store
        .list_operations(&OperationFilter::default(), None, 10)
        .await
        .unwrap();
    assert_eq!(
        listed.operations,
        vec![op],
        "the listing decodes the same row"
    );
}

async fn a_duplicate_operation_id_is_a_conflict_and_leaves_the_first_intact(
    store: &dyn AuditStore,
) {
    let op = operation(Uuid::now_v7(), "a.py");
    store.insert_operation(&op, Some(b"first")).await.unwrap();

    let mut again = op.clone();
    again.filename = "b.py".into();
    let err = store
        .insert_operation(&again, Some(b"second"))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");

    let (stored, content) = store.get_operation(op.id).await.unwrap().unwrap();
    assert_eq!(stored.filename, "a.py");
    assert_eq!(content.as_deref(), Some(&b"first"[..]));
}

async fn completing_an_operation_records_its_outcome(store: &dyn AuditStore) {
    let op = operation(Uuid::now_v7(), "src/lib.rs");
    store
        .insert_operation(&op, Some(b"fn main() {}"))
        .await
        .unwrap();
    let outcome = OperationOutcome {
        status: OperationStatus::Succeeded,
        operation: OperationKind::Updated,
        error: None,
        finished_at: now(),
        duration_ms: Some(17),
    };

    store.complete_operation(op.id, &outcome).await.unwrap();

    let (stored, _) = store.get_operation(op.id).await.unwrap().unwrap();
    assert_eq!(stored.status, OperationStatus::Succeeded);
    assert_eq!(stored.operation, OperationKind::Updated);
    assert_eq!(stored.finished_at, Some(outcome.finished_at));
    assert_eq!(stored.duration_ms, Some(17));
    assert_eq!(stored.error, None);

    let failed = OperationOutcome {
        status: OperationStatus::Failed,
        operation: OperationKind::Failed,
        error: Some("disk full".into()),
        finished_at: now(),
        duration_ms: None,
    };
    store.complete_operation(op.id, &failed).await.unwrap();
    let (stored, _) = store.get_operation(op.id).await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.error.as_deref()),
        (OperationStatus::Failed, Some("disk full"))
    );
}

async fn completing_an_unknown_operation_is_an_error(store: &dyn AuditStore) {
    let outcome = OperationOutcome {
        status: OperationStatus::Succeeded,
        operation: OperationKind::Created,
        error: None,
        finished_at: now(),
        duration_ms: None,
    };
    let err = store
        .complete_operation(Uuid::now_v7(), &outcome)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Other(message) if message.contains("no operation")),
        "{err:?}"
    );
}

async fn pending_operations_lists_only_pending_ones_oldest_first(store: &dyn AuditStore) {
    let ops = insert_operations(store, 5, |i, op| {
        if i == 1 {
            op.status = OperationStatus::Succeeded;
        }
    })
    .await;
    let outcome = OperationOutcome {
        status: OperationStatus::Failed,
        operation: OperationKind::Failed,
        error: Some("crashed".into()),
        finished_at: now(),
        duration_ms: None,
    };
    store.complete_operation(ops[3].id, &outcome).await.unwrap();

    let pending = store.pending_operations().await.unwrap();

    assert_eq!(ids(&pending), vec![ops[0].id, ops[2].id, ops[4].id]);
    assert_eq!(pending[0], ops[0]);
}

// ---------------------------------------------------------------------------------------------
// Listing

async fn listing_is_newest_first_and_pages_with_a_cursor(store: &dyn AuditStore) {
    let ops = insert_operations(store, 25, |_, _| {}).await;
    let everything = OperationFilter::default();

    let first = store.list_operations(&everything, None, 10).await.unwrap();
    let second = store
        .list_operations(&everything, first.next_cursor.as_ref(), 10)
        .await
        .unwrap();
    let third = store
        .list_operations(&everything, second.next_cursor.as_ref(), 10)
        .await
        .unwrap();

    assert_eq!(first.operations.len(), 10);
    assert_eq!(second.operations.len(), 10);
    assert_eq!(third.operations.len(), 5);
    assert!(first.next_cursor.is_some() && second.next_cursor.is_some());
    assert_eq!(third.next_cursor, None);
    let listed: Vec<Uuid> = [first, second, third]
        .iter()
        .flat_map(|page| ids(&page.operations))
        .collect();
    assert_eq!(
        listed.iter().collect::<HashSet<_>>().len(),
        25,
        "no duplicates"
    );
    assert_eq!(
        listed,
        newest_first(&ops.iter().collect::<Vec<_>>()),
        "newest first, no gaps"
    );
    // The rows come back whole, not just their ids.
    let (newest, _) = store.get_operation(ops[24].id).await.unwrap().unwrap();
    assert_eq!(newest, ops[24]);
}

async fn a_page_that_ends_exactly_at_the_last_row_has_no_next_cursor(store: &dyn AuditStore) {
    insert_operations(store, 4, |_, _| {}).await;
    let everything = OperationFilter::default();

    let first = store.list_operations(&everything, None, 2).await.unwrap();
    let second = store
        .list_operations(&everything, first.next_cursor.as_ref(), 2)
        .await
        .unwrap();

    assert_eq!(second.operations.len(), 2);
    assert_eq!(second.next_cursor, None);
    let all = store.list_operations(&everything, None, 4).await.unwrap();
    assert_eq!((all.operations.len(), all.next_cursor), (4, None));
}

async fn listing_filters_by_request_id(store: &dyn AuditStore) {
    let (one, other) = (Uuid::now_v7(), Uuid::now_v7());
    let ops = insert_operations(store, 8, |i, op| {
        op.request_id = if i % 2 == 0 { one } else { other }
    })
    .await;

    let filter = OperationFilter {
        request_id: Some(one),
        ..OperationFilter::default()
    };

    let expected: Vec<&Operation> = ops.iter().filter(|op| op.request_id == one).collect();
    assert_eq!(list_all(store, &filter).await, newest_first(&expected));
}

async fn listing_filters_by_the_caller_of_the_request(store: &dyn AuditStore) {
    let mut by = Vec::new();
    for caller in [Some("key-a"), Some("key-b"), None] {
        let req = new_request(caller, None);
        store.insert_request(&req).await.unwrap();
        let ops = insert_operations(store, 2, |_, op| op.request_id = req.id).await;
        by.push((caller, ops));
    }
    for (caller, ops) in &by {
        let filter = OperationFilter {
            caller: Some(caller.map(str::to_string)),
            ..OperationFilter::default()
        };
        let expected: Vec<&Operation> = ops.iter().collect();
        assert_eq!(
            list_all(store, &filter).await,
            newest_first(&expected),
            "{caller:?}"
        );
    }
    assert_eq!(
        list_all(store, &OperationFilter::default()).await.len(),
        6,
        "no caller filter lists everyone's"
    );
}

async fn listing_filters_by_filename(store: &dyn AuditStore) {
    let ops = insert_operations(store, 9, |i, op| op.filename = format!("src/f{}.py", i % 3)).await;

    let filter = OperationFilter {
        filename: Some("src/f1.py".into()),
        ..OperationFilter::default()
    };

    let expected: Vec<&Operation> = ops.iter().filter(|op| op.filename == "src/f1.py").collect();
    assert_eq!(expected.len(), 3);
    assert_eq!(list_all(store, &filter).await, newest_first(&expected));
    let prefix_only = OperationFilter {
        filename: Some("src/f1".into()),
        ..OperationFilter::default()
    };
    assert!(
        list_all(store, &prefix_only).await.is_empty(),
        "filename matches exactly"
    );
}

async fn listing_filters_by_status(store: &dyn AuditStore) {
    let ops = insert_operations(store, 9, |i, op| {
        op.status = [
            OperationStatus::Pending,
            OperationStatus::Succeeded,
            OperationStatus::Failed,
        ][i % 3];
    })
    .await;

    for status in [
        OperationStatus::Pending,
        OperationStatus::Succeeded,
        OperationStatus::Failed,
    ] {
        let filter = OperationFilter {
            status: Some(status),
            ..OperationFilter::default()
        };
        let expected: Vec<&Operation> = ops.iter().filter(|op| op.status == status).collect();
        assert_eq!(
            list_all(store, &filter).await,
            newest_first(&expected),
            "{status}"
        );
    }
}

async fn listing_filters_by_model(store: &dyn AuditStore) {
    let ops = insert_operations(store, 9, |i, op| {
        op.chosen_model = [Some("model-a"), Some("model-ab"), None][i % 3].map(Into::into);
    })
    .await;

    let filter = OperationFilter {
        model: Some("model-a".into()),
        ..OperationFilter::default()
    };

    let expected: Vec<&Operation> = ops
        .iter()
        .filter(|op| op.chosen_model.as_deref() == Some("model-a"))
        .collect();
    assert_eq!(list_all(store, &filter).await, newest_first(&expected));
}

async fn listing_since_is_inclusive_and_until_is_exclusive(store: &dyn AuditStore) {
    let t0 = now() - TimeDelta::hours(1);
    let at = |seconds: i64| t0 + TimeDelta::seconds(seconds);
    let ops = insert_operations(store, 4, |i, op| op.created_at = at(i as i64)).await;

    let since = OperationFilter {
        since: Some(at(1)),
        ..OperationFilter::default()
    };
    let until = OperationFilter {
        until: Some(at(1)),
        ..OperationFilter::default()
    };
    let window = OperationFilter {
        since: Some(at(1)),
        until: Some(at(3)),
        ..OperationFilter::default()
    };
    let between_rows = OperationFilter {
        since: Some(at(1) + TimeDelta::microseconds(1)),
        ..OperationFilter::default()
    };

    assert_eq!(
        list_all(store, &since).await,
        newest_first(&[&ops[1], &ops[2], &ops[3]])
    );
    assert_eq!(list_all(store, &until).await, newest_first(&[&ops[0]]));
    assert_eq!(
        list_all(store, &window).await,
        newest_first(&[&ops[1], &ops[2]])
    );
    assert_eq!(
        list_all(store, &between_rows).await,
        newest_first(&[&ops[2], &ops[3]])
    );
}

async fn listing_combines_filters_with_and_and_pages_within_them(store: &dyn AuditStore) {
    let request_id = Uuid::now_v7();
    let ops = insert_operations(store, 30, |i, op| {
        op.request_id = if i % 5 == 0 {
            Uuid::now_v7()
        } else {
            request_id
        };
        op.filename = if i % 2 == 0 {
            "a.py".into()
        } else {
            "b.py".into()
        };
        op.status = if i % 3 == 0 {
            OperationStatus::Failed
        } else {
            OperationStatus::Succeeded
        };
    })
    .await;

    let filter = OperationFilter {
        request_id: Some(request_id),
        filename: Some("a.py".into()),
        status: Some(OperationStatus::Succeeded),
        model: Some("model-a".into()),
        caller: None,
        since: Some(ops[0].created_at),
        until: Some(now() + TimeDelta::seconds(1)),
        workspaces: None,
    };

    let expected: Vec<&Operation> = ops
        .iter()
        .filter(|op| {
            op.request_id == request_id
                && op.filename == "a.py"
                && op.status == OperationStatus::Succeeded
        })
        .collect();
    assert!(expected.len() > 3, "spans several pages of 3");
    assert_eq!(list_all(store, &filter).await, newest_first(&expected));
}

async fn an_unparseable_cursor_is_rejected(store: &dyn AuditStore) {
    insert_operations(store, 2, |_, _| {}).await;
    for text in ["", "garbage", "-3", "0", "1.5", "99999999999999999999999"] {
        let err = store
            .list_operations(&OperationFilter::default(), Some(&Cursor(text.into())), 10)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidCursor),
            "{text:?}: {err:?}"
        );
    }
}

/// Both backends stamp with this process's clock, so a stamp lies between two readings of it
/// taken around the call (the lower one cut to the microseconds the backends keep).
async fn heartbeats_and_finishes_are_stamped_with_the_process_clock(store: &dyn AuditStore) {
    use writ_core::jobs::{JobStatus, NewJob};
    let id = Uuid::now_v7();
    let created_at = now() - TimeDelta::minutes(10);
    store
        .insert_job(&NewJob {
            id,
            created_at,
            is_async: true,
            files: vec!["a.py".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let queued = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(
        queued.heartbeat_at, created_at,
        "a new job's heartbeat is its creation"
    );
    assert_eq!(queued.finished_at, None);
    let stale_before = now() - TimeDelta::minutes(1);
    assert_eq!(store.stale_jobs(stale_before).await.unwrap().len(), 1);

    let before = now();
    store.heartbeat_job(id, JobStatus::Running).await.unwrap();
    let after = Utc::now();
    let running = store.get_job(id).await.unwrap().unwrap();
    assert!(
        before <= running.heartbeat_at && running.heartbeat_at <= after,
        "{before} <= {} <= {after}",
        running.heartbeat_at
    );
    assert!(
        store.stale_jobs(stale_before).await.unwrap().is_empty(),
        "a heartbeat makes the job fresh again"
    );

    let before = now();
    assert!(
        store
            .finish_job(id, JobStatus::Done, Some("success"), None, None)
            .await
            .unwrap()
    );
    let after = Utc::now();
    let done = store.get_job(id).await.unwrap().unwrap();
    let finished_at = done.finished_at.unwrap();
    assert!(
        before <= finished_at && finished_at <= after,
        "{before} <= {finished_at} <= {after}"
    );
    assert_eq!(
        done.heartbeat_at, finished_at,
        "one reading for both stamps"
    );
    assert_eq!(done.created_at, created_at);
}

async fn jobs_list_newest_first_within_the_limit_and_keep_is_async(store: &dyn AuditStore) {
    use writ_core::jobs::NewJob;
    let t0 = now() - TimeDelta::minutes(5);
    let jobs: Vec<NewJob> = (0..3)
        .map(|i| NewJob {
            id: Uuid::now_v7(),
            created_at: t0 + TimeDelta::seconds(i),
            is_async: i % 2 == 1,
            files: vec![format!("f{i}.py")],
            ..Default::default()
        })
        .collect();
    // Inserted out of order: the listing follows created_at, not insertion.
    for job in [&jobs[1], &jobs[2], &jobs[0]] {
        store.insert_job(job).await.unwrap();
    }
    let listed = store.list_jobs(&Default::default(), 2).await.unwrap();
    assert_eq!(
        listed.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![jobs[2].id, jobs[1].id]
    );
    assert_eq!(
        listed.iter().map(|j| j.is_async).collect::<Vec<_>>(),
        vec![false, true]
    );
    assert_eq!(listed[0].files, vec!["f2.py"]);
    assert_eq!(listed[0].created_at, jobs[2].created_at);
    assert!(!store.get_job(jobs[0].id).await.unwrap().unwrap().is_async);
    assert_eq!(
        store
            .list_jobs(&Default::default(), 10)
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(store.get_job(Uuid::now_v7()).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// Connecting

async fn a_job_moves_from_queued_to_running_to_done_and_keeps_its_response(store: &dyn AuditStore) {
    use writ_core::jobs::{JobStatus, NewJob};
    let id = Uuid::now_v7();
    let job = NewJob {
        id,
        created_at: now(),
        is_async: true,
        files: vec!["a.py".into(), "b.rs".into()],
        ..Default::default()
    };
    store.insert_job(&job).await.unwrap();
    let got = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(got.status, JobStatus::Queued);
    assert_eq!(got.files, vec!["a.py", "b.rs"]);
    assert!(got.is_async);
    store.heartbeat_job(id, JobStatus::Running).await.unwrap();
    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().status,
        JobStatus::Running
    );
    let response = json!({"status": "success", "results": []});
    assert!(
        store
            .finish_job(id, JobStatus::Done, Some("success"), Some(&response), None)
            .await
            .unwrap()
    );
    let got = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(got.status, JobStatus::Done);
    assert_eq!(got.batch_status.as_deref(), Some("success"));
    assert_eq!(got.response, Some(response));
    assert!(got.finished_at.is_some());
    let listed = store.list_jobs(&Default::default(), 10).await.unwrap();
    assert_eq!(listed[0].id, id);
    assert_eq!(listed[0].response, None, "listings leave the bodies out");
}

/// A batch stores its answer once, on its request, in the commit that closes the request and
/// the job: the job (same id) reads it from there.
async fn a_job_without_an_answer_of_its_own_gives_its_requests(store: &dyn AuditStore) {
    use writ_core::jobs::{JobStatus, NewJob};
    let req = new_request(None, None);
    let answer = json!({"status": "success", "results": [{"path": "a.py"}]});
    store
        .commit(vec![
            AuditWrite::InsertRequest(req.clone()),
            AuditWrite::InsertJob {
                job: NewJob {
                    id: req.id,
                    created_at: now(),
                    is_async: false,
                    files: vec!["a.py".into()],
                    ..Default::default()
                },
                status: JobStatus::Running,
            },
        ])
        .await
        .unwrap();
    assert_eq!(store.get_job(req.id).await.unwrap().unwrap().response, None);
    store
        .commit(vec![
            AuditWrite::FinishRequest {
                id: req.id,
                status: RequestStatus::Success,
                duration_ms: 12,
                response: Some(answer.clone()),
            },
            AuditWrite::FinishJob {
                id: req.id,
                status: JobStatus::Done,
                batch_status: Some("success".into()),
                response: None,
                error: None,
            },
        ])
        .await
        .unwrap();
    let job = store.get_job(req.id).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Done);
    assert_eq!(job.response, Some(answer.clone()));
    assert_eq!(
        store.get_request(req.id).await.unwrap().unwrap().response,
        Some(answer)
    );
    // A job with no request behind it and no answer has none.
    let lone = Uuid::now_v7();
    store
        .insert_job(&NewJob {
            id: lone,
            created_at: now(),
            is_async: true,
            files: vec!["b.py".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(store.get_job(lone).await.unwrap().unwrap().response, None);
}

async fn a_finished_job_is_not_ended_twice(store: &dyn AuditStore) {
    use writ_core::jobs::{JobStatus, NewJob};
    let id = Uuid::now_v7();
    store
        .insert_job(&NewJob {
            id,
            created_at: now(),
            is_async: false,
            files: vec![],
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        store
            .finish_job(id, JobStatus::Failed, None, None, Some("interrupted"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .finish_job(id, JobStatus::Done, Some("success"), None, None)
            .await
            .unwrap()
    );
    let got = store.get_job(id).await.unwrap().unwrap();
    assert_eq!(got.status, JobStatus::Failed);
    assert_eq!(got.error.as_deref(), Some("interrupted"));
    store.heartbeat_job(id, JobStatus::Running).await.unwrap();
    assert_eq!(
        store.get_job(id).await.unwrap().unwrap().status,
        JobStatus::Failed,
        "a heartbeat never revives a finished job"
    );
}

async fn a_lapsed_lease_is_claimed_once_and_its_old_owner_can_no_longer_renew_it(
    store: &dyn AuditStore,
) {
    use writ_core::jobs::{JobStatus, Lease, NewJob};
    let lapsed = Uuid::now_v7();
    let held = Uuid::now_v7();
    let ended = Uuid::now_v7();
    for (id, until) in [
        (lapsed, now() - TimeDelta::seconds(5)),
        (held, now() + TimeDelta::minutes(5)),
        (ended, now() - TimeDelta::seconds(5)),
    ] {
        store
            .insert_job(&NewJob {
                id,
                created_at: now(),
                is_async: true,
                files: vec!["a.py".into()],
                lease: Some(Lease {
                    owner: "replica-a".into(),
                    until,
                }),
                request: Some(r#"{"command":"write_codebase"}"#.into()),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    store
        .finish_job(ended, JobStatus::Done, Some("success"), None, None)
        .await
        .unwrap();
    // A leased job is resumed, never failed by the heartbeat sweep.
    assert!(
        store
            .stale_jobs(now() + TimeDelta::minutes(1))
            .await
            .unwrap()
            .is_empty()
    );

    let claimed = store
        .take_over_jobs("replica-b", now(), now() + TimeDelta::seconds(10), 10)
        .await
        .unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "only the unfinished job whose lease lapsed"
    );
    assert_eq!(claimed[0].job.id, lapsed);
    assert_eq!(claimed[0].attempts, 1);
    assert_eq!(
        claimed[0].request.as_deref(),
        Some(r#"{"command":"write_codebase"}"#)
    );
    assert!(
        store
            .take_over_jobs("replica-c", now(), now() + TimeDelta::seconds(10), 10)
            .await
            .unwrap()
            .is_empty(),
        "a claimed job is not claimed again while its new lease holds"
    );
    let until = now() + TimeDelta::seconds(10);
    assert!(!store.renew_lease(lapsed, "replica-a", until).await.unwrap());
    assert!(store.renew_lease(lapsed, "replica-b", until).await.unwrap());
    assert!(!store.renew_lease(ended, "replica-a", until).await.unwrap());

    // Lapsed again: the next claim counts a second attempt.
    let again = store
        .take_over_jobs(
            "replica-c",
            now() + TimeDelta::seconds(11),
            now() + TimeDelta::seconds(20),
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        again
            .iter()
            .map(|c| (c.job.id, c.attempts))
            .collect::<Vec<_>>(),
        vec![(lapsed, 2)]
    );
}

async fn a_released_lease_is_claimable_at_once_and_only_the_owner_can_release_it(
    store: &dyn AuditStore,
) {
    use writ_core::jobs::{Lease, NewJob};
    let id = Uuid::now_v7();
    store
        .insert_job(&NewJob {
            id,
            created_at: now(),
            is_async: false,
            files: vec!["a.py".into()],
            lease: Some(Lease {
                owner: "replica-a".into(),
                until: now() + TimeDelta::minutes(5),
            }),
            request: None,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!store.release_lease(id, "replica-b", None).await.unwrap());
    assert!(
        store
            .take_over_jobs("replica-b", now(), now() + TimeDelta::seconds(10), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .release_lease(id, "replica-a", Some("handed back"))
            .await
            .unwrap()
    );
    let claimed = store
        .take_over_jobs("replica-b", now(), now() + TimeDelta::seconds(10), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job.error.as_deref(), Some("handed back"));
    assert_eq!(claimed[0].request, None);
}

async fn stale_jobs_are_the_unfinished_ones_whose_heartbeat_stopped(store: &dyn AuditStore) {
    use writ_core::jobs::{JobStatus, NewJob};
    let old = now() - TimeDelta::minutes(10);
    let stale = Uuid::now_v7();
    let finished = Uuid::now_v7();
    let fresh = Uuid::now_v7();
    for (id, at) in [(stale, old), (finished, old), (fresh, now())] {
        store
            .insert_job(&NewJob {
                id,
                created_at: at,
                is_async: true,
                files: vec![],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    store
        .finish_job(finished, JobStatus::Done, Some("success"), None, None)
        .await
        .unwrap();
    let found: Vec<Uuid> = store
        .stale_jobs(now() - TimeDelta::minutes(1))
        .await
        .unwrap()
        .iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(found, vec![stale]);
}

/// Progress events are stored in bursts that mix jobs and vary in size: every field of every event
/// (JSON with quotes, escapes, non-ASCII text and nesting; timestamps to the microsecond) reads
/// back as written, each job's in its own order, whether the burst is a commit of its own or
/// shares one with other records.
async fn a_burst_of_many_jobs_events_reads_back_field_for_field(store: &dyn AuditStore) {
    use writ_core::jobs::JobEvent;
    let jobs: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
    let start = now();
    let event = |job: usize, seq: i64| JobEvent {
        job_id: jobs[job],
        seq,
        created_at: start + TimeDelta::microseconds(seq * 7 + job as i64),
        name: format!("candidate_finished_{job}"),
        data: json!({
            "type": "candidate_finished",
            "model": format!("vendor/model-{seq}"),
            "text": "quotes \" and \\ backslashes, ünïcödé, 改行\nnew line, {braces}, [brackets]",
            "n": seq,
            "nested": {"list": [1, 2.5, null, true, {"k": "v"}], "empty": {}},
        }),
    };
    // 100 events per job, interleaved: one burst alone, then one in a commit with a job's record.
    let mut first: Vec<JobEvent> = Vec::new();
    let mut second: Vec<JobEvent> = Vec::new();
    for seq in 1..=100 {
        for job in 0..3 {
            if seq <= 60 {
                first.push(event(job, seq));
            } else {
                second.push(event(job, seq));
            }
        }
    }
    store.append_job_events(&first).await.unwrap();
    let new_job = writ_core::jobs::NewJob {
        id: Uuid::now_v7(),
        created_at: now(),
        is_async: true,
        files: vec!["a.py".into()],
        ..Default::default()
    };
    store
        .commit(vec![
            AuditWrite::InsertJob {
                job: new_job.clone(),
                status: writ_core::jobs::JobStatus::Queued,
            },
            AuditWrite::AppendEvents(second.clone()),
        ])
        .await
        .unwrap();
    assert!(store.get_job(new_job.id).await.unwrap().is_some());

    for (job, id) in jobs.iter().enumerate() {
        let stored = store.job_events(*id, 0, 1000).await.unwrap();
        let expected: Vec<JobEvent> = (1..=100).map(|seq| event(job, seq)).collect();
        assert_eq!(stored.len(), expected.len());
        for (got, want) in stored.iter().zip(&expected) {
            assert_eq!(got.job_id, want.job_id);
            assert_eq!(got.seq, want.seq);
            assert_eq!(got.created_at, want.created_at);
            assert_eq!(got.name, want.name);
            assert_eq!(got.data, want.data);
        }
    }
}

async fn job_events_replay_after_a_sequence_number_in_order(store: &dyn AuditStore) {
    use writ_core::jobs::JobEvent;
    let id = Uuid::now_v7();
    let event = |seq: i64| JobEvent {
        job_id: id,
        seq,
        created_at: now(),
        name: format!("e{seq}"),
        data: json!({"n": seq}),
    };
    store.append_job_event(&event(1)).await.unwrap();
    store.append_job_event(&event(2)).await.unwrap();
    store
        .append_job_events(&[event(3), event(4), event(5)])
        .await
        .unwrap();
    store.append_job_events(&[]).await.unwrap();
    let after_two = store.job_events(id, 2, 100).await.unwrap();
    assert_eq!(
        after_two.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    assert_eq!(after_two[0].name, "e3");
    assert_eq!(after_two[0].data, json!({"n": 3}));
    assert_eq!(store.job_events(id, 0, 2).await.unwrap().len(), 2);
    let dup = JobEvent {
        job_id: id,
        seq: 3,
        created_at: now(),
        name: "again".into(),
        data: json!(null),
    };
    assert!(matches!(
        store.append_job_event(&dup).await,
        Err(StoreError::Conflict(_))
    ));
}

mod connecting {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_postgres_is_unavailable_within_seconds_and_the_password_stays_hidden() {
        let started = Instant::now();

        let err = match writ_store::connect("postgres://postgres:secretpw@127.0.0.1:1/x").await {
            Ok(_) => panic!("connected to a closed port"),
            Err(err) => err,
        };

        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
        let text = format!("{err} {err:?}");
        assert!(!text.contains("secretpw"), "{text}");
        assert!(text.contains("127.0.0.1:1"), "says where it tried: {text}");
    }

    #[tokio::test]
    async fn an_unknown_url_scheme_names_database_url_and_the_accepted_schemes() {
        let err = match writ_store::connect("mysql://root:hunter2@db/audit").await {
            Ok(_) => panic!("accepted a MySQL URL"),
            Err(err) => err,
        };

        let StoreError::Other(message) = &err else {
            panic!("{err:?}")
        };
        for needle in [
            "DATABASE_URL",
            "postgres://",
            "postgresql://",
            "sqlite:",
            "mysql",
        ] {
            assert!(message.contains(needle), "{needle} missing from {message}");
        }
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[tokio::test]
    async fn a_missing_sqlite_file_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested-name.db");

        let store = writ_store::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();

        store.migrate().await.unwrap();
        assert!(path.exists());
    }

    #[tokio::test]
    async fn an_in_memory_sqlite_database_keeps_its_schema_across_pool_connections() {
        let store = writ_store::connect("sqlite::memory:").await.unwrap();
        store.migrate().await.unwrap();

        // Concurrent reads open more than one pool connection: each must see the same database.
        let mut reads = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let store = Arc::clone(&store);
            reads.spawn(async move { store.pending_operations().await });
        }
        while let Some(read) = reads.join_next().await {
            read.unwrap().unwrap();
        }
        assert!(store.is_migrated().await.unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// Per-backend: connection settings and query plans at scale

/// The listings whose plans are checked, with the index each one is expected to walk when it is
/// selective. Seeded data: 20k operations, 2k requests, 1k filenames, 5 models, 1 in 500 pending.
fn planned_listings(
    request_id: Uuid,
) -> Vec<(&'static str, OperationFilter, Option<&'static str>)> {
    let recent = Utc::now() - TimeDelta::minutes(10);
    vec![
        ("everything", OperationFilter::default(), None),
        (
            "request_id",
            OperationFilter {
                request_id: Some(request_id),
                ..OperationFilter::default()
            },
            Some("operations_request_id_seq_idx"),
        ),
        (
            "filename",
            OperationFilter {
                filename: Some("src/file_7.py".into()),
                ..OperationFilter::default()
            },
            Some("operations_filename_seq_idx"),
        ),
        (
            "pending",
            OperationFilter {
                status: Some(OperationStatus::Pending),
                ..OperationFilter::default()
            },
            Some("operations_"),
        ),
        (
            "succeeded",
            OperationFilter {
                status: Some(OperationStatus::Succeeded),
                ..OperationFilter::default()
            },
            None,
        ),
        (
            "model",
            OperationFilter {
                model: Some("model-3".into()),
                ..OperationFilter::default()
            },
            None,
        ),
        (
            "since",
            OperationFilter {
                since: Some(recent),
                ..OperationFilter::default()
            },
            None,
        ),
        (
            "until",
            OperationFilter {
                until: Some(Utc::now() - TimeDelta::hours(5)),
                ..OperationFilter::default()
            },
            None,
        ),
    ]
}

/// The request id the seeding SQL gives to operations with `g % 2000 = 7`.
fn seeded_request_id() -> Uuid {
    Uuid::parse_str("00000000-0000-0000-0000-000000000007").unwrap()
}

/// Over the seeded rows, every listing of [`planned_listings`], on the first page and after a
/// cursor, has a plan that `acceptable` passes and that names the expected index; and the
/// listing that was planned returns the seeded rows.
async fn assert_seeded_listings_are_planned<D: Dialect>(
    store: &SqlStore<D>,
    acceptable: impl Fn(&str) -> bool,
) {
    let page = store
        .list_operations(&OperationFilter::default(), None, 50)
        .await
        .unwrap();
    let cursor = page.next_cursor.unwrap();
    for (name, filter, index) in planned_listings(seeded_request_id()) {
        for cursor in [None, Some(&cursor)] {
            let plan = store
                .explain_list_operations(&filter, cursor, 50)
                .await
                .unwrap();
            assert!(acceptable(&plan), "{name}: {plan}");
            if let Some(index) = index {
                assert!(plan.contains(index), "{name} should use {index}: {plan}");
            }
        }
    }
    let listed = store
        .list_operations(
            &OperationFilter {
                request_id: Some(seeded_request_id()),
                ..OperationFilter::default()
            },
            None,
            50,
        )
        .await
        .unwrap();
    assert_eq!(listed.operations.len(), 10);
}

mod postgres_only {
    use super::*;

    /// What a server restart does to a store's pooled connections: closes every one of them.
    async fn close_every_connection_to(url: &str) {
        let db = url
            .rsplit('/')
            .next()
            .unwrap()
            .split('?')
            .next()
            .unwrap()
            .to_owned();
        let admin = std::env::var(writ_store::testing::PG_URL_ENV)
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .unwrap();
        let closed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
        )
        .bind(&db)
        .fetch_all(&mut conn)
        .await
        .unwrap();
        assert!(!closed.is_empty(), "the store had connections to close");
    }

    /// A restart of the server closes every pooled connection; writers take theirs unchecked,
    /// so the first commit after it must find an open one by itself instead of failing.
    #[tokio::test]
    async fn commits_go_on_after_the_servers_connections_are_closed() {
        let url = fresh_postgres_url().await;
        let store = writ_store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        for i in 0..8 {
            store
                .insert_request(&new_request(None, Some(&format!("before-{i}"))))
                .await
                .unwrap();
        }
        close_every_connection_to(&url).await;

        let req = new_request(None, Some("after"));
        store.insert_request(&req).await.unwrap();
        assert!(store.get_request(req.id).await.unwrap().is_some());
    }

    /// Progress events have a connection of their own, also taken unchecked: after the server
    /// closed it, the next burst must still be stored, not dropped with a warning.
    #[tokio::test]
    async fn progress_events_go_on_after_the_servers_connections_are_closed() {
        use writ_core::jobs::JobEvent;
        let url = fresh_postgres_url().await;
        let store = writ_store::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let job = Uuid::now_v7();
        let event = |seq: i64| JobEvent {
            job_id: job,
            seq,
            created_at: now(),
            name: "file_started".into(),
            data: json!({"seq": seq}),
        };
        store
            .append_job_events(&[event(1), event(2)])
            .await
            .unwrap();
        close_every_connection_to(&url).await;

        store.append_job_events(&[event(3)]).await.unwrap();
        let stored = store.job_events(job, 0, 10).await.unwrap();
        assert_eq!(stored.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    }

    /// Large contents and answers are compressed inside the commits writes and answers wait for:
    /// with lz4 where the server has it (pglz costs about four times the CPU), and read back
    /// byte for byte either way.
    #[tokio::test]
    async fn large_contents_and_answers_are_stored_with_lz4_where_the_server_has_it() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        // What this server can do, asked of a throwaway table rather than assumed.
        let has_lz4 = sqlx::query("CREATE TEMP TABLE probe (v bytea COMPRESSION lz4)")
            .execute(store.pool())
            .await
            .is_ok();
        let expected = if has_lz4 { "lz4" } else { "pglz" };

        let req = new_request(None, None);
        store.insert_request(&req).await.unwrap();
        let op = operation(req.id, "src/large.py");
        let content: Vec<u8> = (0..4000)
            .flat_map(|i| format!("def f_{i}(x: int) -> int:\n    return x + {i}\n\n").into_bytes())
            .collect();
        store.insert_operation(&op, Some(&content)).await.unwrap();
        let files: Vec<_> = (0..200)
            .map(|i| json!({"path": format!("src/m_{i}.py"), "status": "written"}))
            .collect();
        let answer = json!({"status": "succeeded", "files": files});
        store
            .finish_request(req.id, RequestStatus::Success, 5, Some(&answer))
            .await
            .unwrap();

        let method = |sql: &'static str| {
            let pool = store.pool().clone();
            let id = if sql.contains("operation_contents") {
                op.id
            } else {
                req.id
            };
            async move {
                sqlx::query_scalar::<_, Option<String>>(sql)
                    .bind(id)
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            method("SELECT pg_column_compression(content) FROM operation_contents WHERE operation_id = $1")
                .await
                .as_deref(),
            Some(expected)
        );
        assert_eq!(
            method("SELECT pg_column_compression(response) FROM requests WHERE id = $1")
                .await
                .as_deref(),
            Some(expected)
        );
        let (_, stored) = store.get_operation(op.id).await.unwrap().unwrap();
        assert_eq!(stored.as_deref(), Some(content.as_slice()));
        let stored = store.get_request(req.id).await.unwrap().unwrap();
        assert_eq!(stored.response, Some(answer));
    }

    #[tokio::test]
    async fn a_filtered_listing_over_20k_rows_walks_an_index_not_the_table() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        sqlx::query(
            "INSERT INTO operations (id, request_id, created_at, filename, kind, operation, status, chosen_model) \
             SELECT gen_random_uuid(), \
                    ('00000000-0000-0000-0000-' || lpad(to_hex(g % 2000), 12, '0'))::uuid, \
                    now() - make_interval(secs => 20000 - g), \
                    'src/file_' || (g % 1000) || '.py', 'code', 'created', \
                    CASE WHEN g % 500 = 0 THEN 'pending' ELSE 'succeeded' END, \
                    'model-' || (g % 5) \
             FROM generate_series(1, 20000) AS g",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query("ANALYZE operations")
            .execute(store.pool())
            .await
            .unwrap();

        assert_seeded_listings_are_planned(&store, |plan| !plan.contains("Seq Scan")).await;
    }
    /// The prompt context of every batch is "this caller's newest operations". On a database
    /// without statistics (new, or autovacuum off) PostgreSQL used to answer it by reading every
    /// matching row and sorting them; it must stay a walk down one index that stops after a page.
    #[tokio::test]
    async fn a_callers_newest_operations_are_an_index_walk_even_without_statistics() {
        let store = PgStore::connect(&fresh_postgres_url().await).await.unwrap();
        store.migrate().await.unwrap();
        let bitmap: String = sqlx::query_scalar("SHOW enable_bitmapscan")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(bitmap, "off");
        sqlx::query(
            "INSERT INTO operations (id, request_id, created_at, filename, kind, operation, status, caller) \
             SELECT gen_random_uuid(), gen_random_uuid(), now(), 'src/f_' || g || '.py', 'code', \
                    'created', 'succeeded', CASE WHEN g % 10 = 0 THEN 'key-a' ELSE '' END \
             FROM generate_series(1, 20000) AS g",
        )
        .execute(store.pool())
        .await
        .unwrap();
        for caller in [None, Some("key-a".to_string())] {
            let filter = OperationFilter {
                caller: Some(caller.clone()),
                ..OperationFilter::default()
            };
            let plan = store
                .explain_list_operations(&filter, None, 10)
                .await
                .unwrap();
            assert!(
                plan.contains("Index Scan Backward")
                    && !plan.contains("Sort")
                    && !plan.contains("Bitmap"),
                "{caller:?}: {plan}"
            );
            let page = store.list_operations(&filter, None, 10).await.unwrap();
            assert_eq!(page.operations.len(), 10);
        }
    }
}

mod sqlite_only {
    use super::*;

    #[tokio::test]
    async fn connections_use_wal_full_sync_foreign_keys_and_a_busy_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::connect(&fresh_sqlite_url(dir.path()))
            .await
            .unwrap();

        let mut conn = store.pool().acquire().await.unwrap();
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let busy_timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
            .fetch_one(&mut *conn)
            .await
            .unwrap();

        assert_eq!(journal, "wal");
        assert_eq!(synchronous, 2, "FULL");
        assert_eq!(foreign_keys, 1);
        assert!(busy_timeout >= 1000, "{busy_timeout} ms");
    }

    #[tokio::test]
    async fn a_filtered_listing_over_20k_rows_walks_an_index_instead_of_sorting_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::connect(&fresh_sqlite_url(dir.path()))
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let now_micros = Utc::now().timestamp_micros();
        sqlx::query(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000) \
             INSERT INTO operations (id, request_id, created_at, filename, kind, operation, status, chosen_model) \
             SELECT randomblob(16), \
                    unhex(printf('%032x', n % 2000)), \
                    ?1 - (20000 - n) * 1000000, \
                    'src/file_' || (n % 1000) || '.py', 'code', 'created', \
                    CASE WHEN n % 500 = 0 THEN 'pending' ELSE 'succeeded' END, \
                    'model-' || (n % 5) \
             FROM g",
        )
        .bind(now_micros)
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();

        // Sorting the whole table is what must not happen; a scan of an index in seq order is fine.
        assert_seeded_listings_are_planned(&store, |plan| {
            let full_scan = plan.lines().any(|step| step.trim() == "SCAN operations");
            !(full_scan && plan.contains("TEMP B-TREE"))
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// API keys (KeyStore)

fn key_record(id: &str, name: &str, at: DateTime<Utc>) -> writ_core::keys::ApiKeyRecord {
    writ_core::keys::ApiKeyRecord {
        id: id.to_string(),
        name: name.to_string(),
        secret_sha256: format!("{:0>64}", id),
        // Microseconds: what both backends keep.
        created_at: DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap(),
        revoked_at: None,
        scopes: writ_core::keys::Scopes::of(&[writ_core::keys::Scope::Read]),
        workspaces: None,
    }
}

async fn an_api_key_round_trips_and_is_found_by_id(store: &dyn AuditStore) {
    assert!(!store.any_keys().await.unwrap());
    assert_eq!(store.find_key("0123456789ab").await.unwrap(), None);
    let t0 = Utc::now();
    let a = key_record("0123456789ab", "ci bot", t0);
    let b = key_record("ba9876543210", "alice", t0 + TimeDelta::seconds(1));
    store.create_key(&b).await.unwrap();
    store.create_key(&a).await.unwrap();
    assert!(store.any_keys().await.unwrap());
    assert_eq!(store.find_key(&a.id).await.unwrap(), Some(a.clone()));
    assert_eq!(store.list_keys().await.unwrap(), vec![a, b], "oldest first");
}

async fn revoking_a_key_keeps_it_listed_with_the_first_revocation_time(store: &dyn AuditStore) {
    let a = key_record("0123456789ab", "ci bot", Utc::now());
    store.create_key(&a).await.unwrap();
    let first = DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap();
    assert!(store.revoke_key(&a.id, first).await.unwrap());
    assert!(
        store
            .revoke_key(&a.id, first + TimeDelta::seconds(5))
            .await
            .unwrap()
    );
    assert!(
        !store.revoke_key("ffffffffffff", first).await.unwrap(),
        "unknown id"
    );
    let found = store.find_key(&a.id).await.unwrap().unwrap();
    assert_eq!(found.revoked_at, Some(first));
    assert_eq!(store.list_keys().await.unwrap().len(), 1);
    assert!(
        store.any_keys().await.unwrap(),
        "a revoked key still counts: auth stays on"
    );
}

async fn a_duplicate_api_key_id_is_a_conflict(store: &dyn AuditStore) {
    let a = key_record("0123456789ab", "first", Utc::now());
    store.create_key(&a).await.unwrap();
    let again = key_record("0123456789ab", "second", Utc::now());
    assert!(matches!(
        store.create_key(&again).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(store.find_key(&a.id).await.unwrap().unwrap().name, "first");
}

// ---------------------------------------------------------------------------------------------
// Write sessions

fn write_session(caller: Option<&str>, updated_at: DateTime<Utc>) -> WriteSession {
    WriteSession {
        id: Uuid::now_v7(),
        caller: caller.map(str::to_string),
        target_file: "src/big.py".into(),
        operation: WriteMode::Create,
        intent: Some("a large module".into()),
        create_dirs: true,
        commit: Some(true),
        review: Some(true),
        state: SessionState::AwaitingContent,
        bytes_received: 0,
        chunks: 0,
        tail: Vec::new(),
        correction_rounds: 0,
        created_at: updated_at,
        updated_at,
        finished_at: None,
        receipt: None,
        error: None,
        workspace: "default".into(),
    }
}

fn chunk<'a>(session: &WriteSession, seq: i64, content: &'a [u8], total: i64) -> ChunkAppend<'a> {
    ChunkAppend {
        session_id: session.id,
        seq,
        content,
        bytes_received: total,
        tail: content,
        at: now(),
    }
}

fn transition<'a>(from: &'a [SessionState], to: SessionState) -> SessionTransition<'a> {
    SessionTransition {
        from,
        to,
        at: now(),
        receipt: None,
        error: None,
        count_correction: false,
        content: None,
        drop_content: false,
        records: &[],
    }
}

async fn a_write_session_round_trips_and_its_chunks_read_back_in_order(store: &dyn AuditStore) {
    let session = write_session(Some("k1"), now());
    store.insert_write_session(&session).await.unwrap();
    assert_eq!(
        store.get_write_session(session.id).await.unwrap(),
        Some(session.clone())
    );
    assert!(
        store
            .get_write_session(Uuid::now_v7())
            .await
            .unwrap()
            .is_none()
    );

    // A chunk boundary inside a two-byte character: the bytes are kept as they came.
    let first = "héllo\n".as_bytes();
    let (a, b) = first.split_at(2);
    assert!(
        store
            .append_write_session_chunk(&chunk(&session, 1, a, 2))
            .await
            .unwrap()
    );
    assert!(
        store
            .append_write_session_chunk(&chunk(&session, 2, b, first.len() as i64))
            .await
            .unwrap()
    );
    assert_eq!(
        store.write_session_content(session.id).await.unwrap(),
        first
    );
    let stored = store.get_write_session(session.id).await.unwrap().unwrap();
    assert_eq!(stored.chunks, 2);
    assert_eq!(stored.bytes_received, first.len() as i64);
    assert_eq!(stored.tail, b);
    assert!(stored.updated_at >= session.updated_at);
}

async fn a_chunk_appended_out_of_turn_or_after_the_session_moved_on_is_refused(
    store: &dyn AuditStore,
) {
    let session = write_session(None, now());
    store.insert_write_session(&session).await.unwrap();
    assert!(
        store
            .append_write_session_chunk(&chunk(&session, 1, b"one", 3))
            .await
            .unwrap()
    );
    // Another append already took place 1.
    assert!(
        !store
            .append_write_session_chunk(&chunk(&session, 1, b"two", 6))
            .await
            .unwrap()
    );
    assert!(
        store
            .transition_write_session(
                session.id,
                &transition(&[SessionState::AwaitingContent], SessionState::Finalizing)
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .append_write_session_chunk(&chunk(&session, 2, b"two", 6))
            .await
            .unwrap()
    );
    assert_eq!(
        store.write_session_content(session.id).await.unwrap(),
        b"one"
    );
    assert_eq!(
        store
            .get_write_session(session.id)
            .await
            .unwrap()
            .unwrap()
            .chunks,
        1
    );
}

async fn a_session_changes_state_once_and_can_replace_or_drop_its_content(store: &dyn AuditStore) {
    let session = write_session(Some("k1"), now());
    store.insert_write_session(&session).await.unwrap();
    store
        .append_write_session_chunk(&chunk(&session, 1, b"ab\xffc", 4))
        .await
        .unwrap();
    let claim = transition(&[SessionState::AwaitingContent], SessionState::Finalizing);
    assert!(
        store
            .transition_write_session(session.id, &claim)
            .await
            .unwrap()
    );
    assert!(
        !store
            .transition_write_session(session.id, &claim)
            .await
            .unwrap(),
        "claimed twice"
    );

    let corrected = SessionTransition {
        count_correction: true,
        content: Some(b"abXc"),
        ..transition(&[SessionState::Finalizing], SessionState::NeedsCorrections)
    };
    assert!(
        store
            .transition_write_session(session.id, &corrected)
            .await
            .unwrap()
    );
    assert_eq!(
        store.write_session_content(session.id).await.unwrap(),
        b"abXc"
    );
    let stored = store.get_write_session(session.id).await.unwrap().unwrap();
    assert_eq!(stored.state, SessionState::NeedsCorrections);
    assert_eq!(stored.correction_rounds, 1);
    assert_eq!(stored.finished_at, None);

    let receipt = json!({"sha256": "ab", "bytes": 4});
    let done = SessionTransition {
        receipt: Some(&receipt),
        drop_content: true,
        ..transition(&[SessionState::NeedsCorrections], SessionState::Done)
    };
    assert!(
        store
            .transition_write_session(session.id, &done)
            .await
            .unwrap()
    );
    let stored = store.get_write_session(session.id).await.unwrap().unwrap();
    assert_eq!(stored.state, SessionState::Done);
    assert_eq!(stored.receipt, Some(receipt));
    assert!(stored.finished_at.is_some());
    assert!(
        store
            .write_session_content(session.id)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn a_session_change_and_its_audit_records_land_together_or_not_at_all(
    store: &dyn AuditStore,
) {
    let session = write_session(Some("k1"), now());
    store.insert_write_session(&session).await.unwrap();
    let records = |request: &NewRequest, finished: Uuid| {
        vec![
            AuditWrite::InsertRequest(request.clone()),
            AuditWrite::FinishRequest {
                id: finished,
                status: RequestStatus::Error,
                duration_ms: 0,
                response: None,
            },
        ]
    };
    let expire = |records| SessionTransition {
        drop_content: true,
        records,
        ..transition(&SessionState::OPEN_STORED, SessionState::Expired)
    };

    // Records that cannot be written (a request finished that was never recorded): the change
    // does not happen either.
    let refused = new_request(Some("k1"), None);
    let broken = records(&refused, Uuid::now_v7());
    assert!(
        store
            .transition_write_session(session.id, &expire(&broken))
            .await
            .is_err()
    );
    assert!(store.get_request(refused.id).await.unwrap().is_none());
    let stored = store.get_write_session(session.id).await.unwrap().unwrap();
    assert_eq!(stored.state, SessionState::AwaitingContent);

    // Together: the change and its records.
    let request = new_request(Some("k1"), None);
    let whole = records(&request, request.id);
    assert!(
        store
            .transition_write_session(session.id, &expire(&whole))
            .await
            .unwrap()
    );
    let stored = store.get_write_session(session.id).await.unwrap().unwrap();
    assert_eq!(stored.state, SessionState::Expired);
    assert_eq!(
        store.get_request(request.id).await.unwrap().unwrap().status,
        RequestStatus::Error
    );

    // A change that does not apply (the session moved on) writes none of its records.
    let late = new_request(Some("k1"), None);
    let again = records(&late, late.id);
    assert!(
        !store
            .transition_write_session(session.id, &expire(&again))
            .await
            .unwrap()
    );
    assert!(store.get_request(late.id).await.unwrap().is_none());
}

async fn open_sessions_are_counted_per_caller_and_abandoned_ones_listed_oldest_first(
    store: &dyn AuditStore,
) {
    let t0 = now() - TimeDelta::hours(2);
    let old = write_session(Some("k1"), t0);
    let older = write_session(Some("k2"), t0 - TimeDelta::minutes(5));
    let fresh = write_session(Some("k1"), now());
    let keyless = write_session(None, now());
    let finished = write_session(Some("k1"), t0);
    for s in [&old, &older, &fresh, &keyless, &finished] {
        store.insert_write_session(s).await.unwrap();
    }
    store
        .transition_write_session(
            finished.id,
            &transition(&[SessionState::AwaitingContent], SessionState::Expired),
        )
        .await
        .unwrap();
    let an_hour_ago = now() - TimeDelta::hours(1);
    assert_eq!(
        store
            .count_open_write_sessions(Some("k1"), t0 - TimeDelta::hours(1))
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .count_open_write_sessions(Some("k1"), an_hour_ago)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .count_open_write_sessions(None, an_hour_ago)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .count_open_write_sessions(Some("k3"), an_hour_ago)
            .await
            .unwrap(),
        0
    );

    let abandoned = store
        .abandoned_write_sessions(an_hour_ago, 10)
        .await
        .unwrap();
    let ids: Vec<Uuid> = abandoned.iter().map(|s| s.id).collect();
    assert_eq!(ids, vec![older.id, old.id]);
    assert_eq!(
        store
            .abandoned_write_sessions(an_hour_ago, 1)
            .await
            .unwrap()
            .len(),
        1
    );
}

// ---------------------------------------------------------------------------------------------
// Workspaces

fn workspace_record(name: &str, kind: WorkspaceKind) -> WorkspaceRecord {
    let git = kind == WorkspaceKind::GitWorktree;
    WorkspaceRecord {
        name: WorkspaceName::parse(name).unwrap(),
        kind,
        root: format!("/srv/workspaces/{name}"),
        source: git.then(|| "/srv/workspaces/repo".to_owned()),
        branch: git.then(|| format!("task/{name}")),
        base_ref: git.then(|| "HEAD".to_owned()),
        // Microseconds: what both backends keep.
        created_at: DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap(),
        created_by: git.then(|| "0123456789ab".to_owned()),
        // Set on worktrees only, so a listing shows both a setting and none read back.
        git_commit: git.then_some(true),
    }
}

async fn a_requests_commit_reads_back_and_a_later_record_replaces_it(store: &dyn AuditStore) {
    let (committed, other) = (Uuid::now_v7(), Uuid::now_v7());
    assert_eq!(store.request_commit(committed).await.unwrap(), None);
    store.record_commit(committed, "1111").await.unwrap();
    assert_eq!(
        store.request_commit(committed).await.unwrap().as_deref(),
        Some("1111")
    );
    assert_eq!(
        store.request_commit(other).await.unwrap(),
        None,
        "only the request committed"
    );
    // A resumed batch's one commit holds every file: it replaces the first record.
    store.record_commit(committed, "2222").await.unwrap();
    assert_eq!(
        store.request_commit(committed).await.unwrap().as_deref(),
        Some("2222")
    );
}

async fn a_workspace_round_trips_and_workspaces_list_by_name(store: &dyn AuditStore) {
    assert_eq!(store.list_workspaces().await.unwrap(), vec![]);
    assert_eq!(store.find_workspace("task-b").await.unwrap(), None);
    let b = workspace_record("task-b", WorkspaceKind::GitWorktree);
    let a = workspace_record("task-a", WorkspaceKind::Empty);
    store.create_workspace(&b).await.unwrap();
    store.create_workspace(&a).await.unwrap();
    assert_eq!(
        store.find_workspace("task-b").await.unwrap(),
        Some(b.clone())
    );
    assert_eq!(
        store.list_workspaces().await.unwrap(),
        vec![a, b],
        "by name"
    );
}

async fn a_taken_workspace_name_is_a_conflict_and_deleting_frees_it(store: &dyn AuditStore) {
    let first = workspace_record("w", WorkspaceKind::Empty);
    store.create_workspace(&first).await.unwrap();
    let second = workspace_record("w", WorkspaceKind::Directory);
    let err = store.create_workspace(&second).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(store.find_workspace("w").await.unwrap(), Some(first));
    use writ_core::workspace_registry::WorkspaceDeletion;
    assert_eq!(
        store.delete_workspace("w").await.unwrap(),
        WorkspaceDeletion::Deleted
    );
    assert_eq!(
        store.delete_workspace("w").await.unwrap(),
        WorkspaceDeletion::NotFound,
        "already gone"
    );
    store.create_workspace(&second).await.unwrap();
    assert_eq!(store.find_workspace("w").await.unwrap(), Some(second));
}

async fn a_key_bound_to_workspaces_reads_back_bound_and_an_unbound_one_may_use_all(
    store: &dyn AuditStore,
) {
    let mut bound = key_record("0123456789ab", "agent", Utc::now());
    bound.workspaces = Some(vec!["task-a".to_owned(), "task-b".to_owned()]);
    let free = key_record("ba9876543210", "ops", Utc::now());
    store.create_key(&bound).await.unwrap();
    store.create_key(&free).await.unwrap();
    let found = store.find_key(&bound.id).await.unwrap().unwrap();
    assert_eq!(found, bound);
    assert!(found.may_use("task-b") && !found.may_use("default"));
    let found = store.find_key(&free.id).await.unwrap().unwrap();
    assert_eq!(found.workspaces, None);
    assert!(found.may_use("default") && found.may_use("anything"));
}

// ---------------------------------------------------------------------------------------------
// Workspace budgets and deletion

async fn a_workspace_budget_round_trips_and_only_a_known_workspace_takes_one(
    store: &dyn AuditStore,
) {
    use writ_core::budgets::Budget;
    store
        .create_workspace(&workspace_record("team", WorkspaceKind::Empty))
        .await
        .unwrap();
    assert_eq!(
        store.workspace_budget("team").await.unwrap(),
        Budget::default()
    );
    let budget = Budget {
        daily_cost: Some(0.000_001),
        monthly_tokens: Some(20_000_000),
        ..Budget::default()
    };
    assert!(store.set_workspace_budget("team", &budget).await.unwrap());
    assert_eq!(store.workspace_budget("team").await.unwrap(), budget);
    // `default` is never stored but may carry a budget; an unknown name may not.
    let tokens = Budget {
        daily_tokens: Some(5),
        ..Budget::default()
    };
    assert!(
        store
            .set_workspace_budget("default", &tokens)
            .await
            .unwrap()
    );
    assert_eq!(store.workspace_budget("default").await.unwrap(), tokens);
    assert!(
        !store
            .set_workspace_budget("nowhere", &tokens)
            .await
            .unwrap()
    );
    assert_eq!(
        store.workspace_budget("nowhere").await.unwrap(),
        Budget::default()
    );
    // Set again, it replaces; empty, it goes.
    assert!(store.set_workspace_budget("team", &tokens).await.unwrap());
    assert_eq!(store.workspace_budget("team").await.unwrap(), tokens);
    assert!(
        store
            .set_workspace_budget("team", &Budget::default())
            .await
            .unwrap()
    );
    assert_eq!(
        store.workspace_budget("team").await.unwrap(),
        Budget::default()
    );
    assert_eq!(store.workspace_budget("default").await.unwrap(), tokens);
}

fn spent_entry(caller: Option<&str>, workspace: &str, at: DateTime<Utc>) -> SpendEntry {
    SpendEntry {
        at,
        caller: caller.map(str::to_owned),
        workspace: workspace.into(),
        calls: 1,
        tokens: 0,
        cost: 0.0,
    }
}

async fn the_ledger_adds_each_call_to_its_key_and_workspace_for_the_day_it_was_made(
    store: &dyn AuditStore,
) {
    let today = now();
    let yesterday = today - chrono::Duration::days(1);
    let add = |caller, workspace, at, calls, tokens, cost| SpendEntry {
        calls,
        tokens,
        cost,
        ..spent_entry(caller, workspace, at)
    };
    for entry in [
        add(Some("key-a"), "team", today, 1, 100, 0.0),
        // The same call settled below its estimate, with its cost.
        add(Some("key-a"), "team", today, 0, -40, 0.002),
        add(Some("key-b"), "team", today, 1, 50, 0.001),
        add(Some("key-a"), "other", today, 1, 10, 0.0),
        add(Some("key-a"), "team", yesterday, 1, 1000, 1.0),
        add(None, "team", today, 1, 5, 0.0),
    ] {
        store.record_spend(&entry).await.unwrap();
    }

    let team = store
        .spent(SpendHolder::Workspace("team"), today)
        .await
        .unwrap();
    assert_eq!(
        (team.calls, team.tokens),
        (3, 115),
        "every key's calls, auth off too"
    );
    assert!((team.cost - 0.003).abs() < 1e-12, "{team:?}");
    let since_yesterday = store
        .spent(SpendHolder::Workspace("team"), yesterday)
        .await
        .unwrap();
    assert_eq!((since_yesterday.calls, since_yesterday.tokens), (4, 1115));
    let a = store.spent(SpendHolder::Key("key-a"), today).await.unwrap();
    assert_eq!((a.calls, a.tokens), (2, 70), "its calls in every workspace");
    assert_eq!(
        store
            .spent(SpendHolder::Workspace("none"), yesterday)
            .await
            .unwrap(),
        Spend::default()
    );
    // A window that began during a day reads that day whole.
    let late_today = store
        .spent(
            SpendHolder::Key("key-a"),
            today + chrono::Duration::seconds(1),
        )
        .await
        .unwrap();
    assert_eq!(late_today.tokens, 70);
}

async fn concurrent_calls_of_one_key_are_each_counted(store: &dyn AuditStore) {
    let at = now();
    let adds = (0..16).map(|i| {
        let entry = SpendEntry {
            tokens: i,
            cost: 0.5,
            ..spent_entry(Some("key-a"), "team", at)
        };
        async move { store.record_spend(&entry).await }
    });
    for added in futures::future::join_all(adds).await {
        added.unwrap();
    }
    let spent = store.spent(SpendHolder::Key("key-a"), at).await.unwrap();
    assert_eq!(
        (spent.calls, spent.tokens),
        (16, (0..16).sum::<i64>() as u64)
    );
    assert!((spent.cost - 8.0).abs() < 1e-9);
}

/// Empties the ledger and runs its migration from the operations again, as an upgrade does on a
/// database that already holds spend.
async fn fill_the_ledger_from_the_operations(fresh: &Fresh) {
    let (dir, file) = if fresh.url.starts_with("sqlite") {
        ("sqlite", "0019_model_spend_from_operations.sql")
    } else {
        ("postgres", "0024_model_spend_from_operations.sql")
    };
    let text = std::fs::read_to_string(format!(
        "{}/../../migrations/{dir}/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    if dir == "sqlite" {
        let pool = sqlx::SqlitePool::connect(&fresh.url).await.unwrap();
        sqlx::raw_sql("DELETE FROM model_spend")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(text))
            .execute(&pool)
            .await
            .unwrap();
    } else {
        let pool = sqlx::PgPool::connect(&fresh.url).await.unwrap();
        sqlx::raw_sql("DELETE FROM model_spend")
            .execute(&pool)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(text))
            .execute(&pool)
            .await
            .unwrap();
    }
}

/// A request in `workspace` by `caller`, received at `at`, whose operation records a candidate
/// (3,812 tokens, 0.0123) and an arbiter call (120 tokens, 0.001) — what operations held of spend
/// before the ledger.
async fn spent_before_the_ledger(
    store: &dyn AuditStore,
    workspace: &str,
    caller: &str,
    at: DateTime<Utc>,
) {
    let mut req = new_request(Some(caller), None);
    req.workspace = workspace.into();
    req.received_at = at;
    let mut op = operation(req.id, "spent.py");
    op.detail = Some(
        json!({"calls": [{"role": "arbiter", "model": "m", "latency_ms": 5,
        "prompt_tokens": 100, "completion_tokens": 20, "cost": 0.001}]}),
    );
    store
        .commit(vec![
            AuditWrite::InsertRequest(req),
            AuditWrite::InsertOperation {
                operation: op,
                content: None,
            },
        ])
        .await
        .unwrap();
}

async fn a_workspace_with_a_queued_or_running_job_is_not_deleted_and_its_budget_goes_with_it(
    store: &dyn AuditStore,
) {
    use writ_core::budgets::Budget;
    use writ_core::jobs::{JobStatus, NewJob};
    use writ_core::workspace_registry::WorkspaceDeletion;
    store
        .create_workspace(&workspace_record("busy", WorkspaceKind::Empty))
        .await
        .unwrap();
    let budget = Budget {
        daily_tokens: Some(1),
        ..Budget::default()
    };
    assert!(store.set_workspace_budget("busy", &budget).await.unwrap());
    let (queued, running, done_elsewhere) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    for (id, workspace, status) in [
        (queued, "busy", JobStatus::Queued),
        (running, "busy", JobStatus::Running),
        (done_elsewhere, "default", JobStatus::Running),
    ] {
        store
            .commit(vec![AuditWrite::InsertJob {
                job: NewJob {
                    id,
                    created_at: now(),
                    workspace: workspace.into(),
                    ..Default::default()
                },
                status,
            }])
            .await
            .unwrap();
    }
    assert_eq!(
        store.delete_workspace("busy").await.unwrap(),
        WorkspaceDeletion::Busy(vec![queued, running])
    );
    assert!(store.find_workspace("busy").await.unwrap().is_some());
    assert_eq!(store.workspace_budget("busy").await.unwrap(), budget);

    for id in [queued, running] {
        store
            .commit(vec![AuditWrite::FinishJob {
                id,
                status: JobStatus::Done,
                batch_status: Some("success".into()),
                response: None,
                error: None,
            }])
            .await
            .unwrap();
    }
    assert_eq!(
        store.delete_workspace("busy").await.unwrap(),
        WorkspaceDeletion::Deleted
    );
    assert_eq!(store.find_workspace("busy").await.unwrap(), None);
    assert_eq!(
        store.delete_workspace("busy").await.unwrap(),
        WorkspaceDeletion::NotFound
    );
    // Made again under the same name, it starts without the old budget.
    store
        .create_workspace(&workspace_record("busy", WorkspaceKind::Empty))
        .await
        .unwrap();
    assert_eq!(
        store.workspace_budget("busy").await.unwrap(),
        Budget::default()
    );
}

/// The other half of an atomic delete: a batch admitted while its workspace is deleted has its
/// opening commit refused (request and job alike), so it never runs there.
async fn a_job_is_recorded_only_in_a_stored_workspace_or_default(store: &dyn AuditStore) {
    use writ_core::jobs::{JobStatus, NewJob};
    let opening = |workspace: &str| {
        let mut req = new_request(Some("key-a"), None);
        req.workspace = workspace.into();
        let id = req.id;
        (
            id,
            vec![
                AuditWrite::InsertRequest(req),
                AuditWrite::InsertJob {
                    job: NewJob {
                        id,
                        created_at: now(),
                        workspace: workspace.into(),
                        ..Default::default()
                    },
                    status: JobStatus::Running,
                },
            ],
        )
    };
    let (gone, writes) = opening("gone");
    let err = store.commit(writes).await.unwrap_err();
    assert!(
        err.to_string().contains("no workspace named 'gone'"),
        "{err}"
    );
    assert!(store.get_job(gone).await.unwrap().is_none());
    assert!(
        store.get_request(gone).await.unwrap().is_none(),
        "the whole opening is refused"
    );
    store
        .create_workspace(&workspace_record("gone", WorkspaceKind::Empty))
        .await
        .unwrap();
    for workspace in ["gone", "default"] {
        let (id, writes) = opening(workspace);
        store.commit(writes).await.unwrap();
        assert_eq!(
            store.get_job(id).await.unwrap().unwrap().workspace,
            workspace
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Claims

/// A claim of `workspace` in the repository `/srv/repo` on `paths`, made at `at` for `ttl_secs`.
fn claim_at(
    workspace: &str,
    paths: &[&str],
    ttl_secs: u64,
    at: DateTime<Utc>,
) -> writ_core::claims::Claim {
    writ_core::claims::NewClaim::parse(
        paths.iter().map(|p| (*p).to_owned()).collect(),
        Some(ttl_secs),
    )
    .unwrap()
    .held_by(workspace, "/srv/repo", Some("0123456789ab".into()), at)
}

async fn claims_are_listed_per_repository_while_live_and_expire_with_their_ttl(
    store: &dyn AuditStore,
) {
    let t0 = now();
    let a = claim_at("task-a", &["src/*.py", "README"], 60, t0);
    let b = claim_at("task-b", &["docs/**"], 10, t0 + TimeDelta::seconds(1));
    let mut elsewhere = claim_at("other", &["src/*.py"], 60, t0);
    elsewhere.repository = "/srv/another".into();
    for claim in [&a, &b, &elsewhere] {
        store.insert_claim(claim).await.unwrap();
    }

    assert_eq!(
        store
            .live_claims("/srv/repo", t0 + TimeDelta::seconds(2))
            .await
            .unwrap(),
        vec![a.clone(), b.clone()],
        "oldest first, field for field, this repository's only"
    );
    // `b` lasts 10 s from t0+1: live until just before t0+11.
    let at = t0 + TimeDelta::seconds(11);
    assert_eq!(
        store.live_claims("/srv/repo", at).await.unwrap(),
        vec![a.clone()]
    );
    assert_eq!(
        store.live_claims("/srv/another", at).await.unwrap(),
        vec![elsewhere]
    );
    // A claim made later forgets the expired ones of its repository: releasing `b` finds none.
    store
        .insert_claim(&claim_at("task-c", &["x"], 60, at))
        .await
        .unwrap();
    assert!(!store.release_claim("task-b", b.id, t0).await.unwrap());
}

async fn a_claim_is_released_only_by_its_workspace(store: &dyn AuditStore) {
    let t0 = now();
    let first = claim_at("task-a", &["a.py"], 60, t0);
    let second = claim_at("task-a", &["b.py"], 60, t0);
    let short = claim_at("task-a", &["c.py"], 1, t0);
    let theirs = claim_at("task-b", &["a.py"], 60, t0);
    for claim in [&first, &second, &short, &theirs] {
        store.insert_claim(claim).await.unwrap();
    }
    let at = t0 + TimeDelta::seconds(5);

    assert!(
        !store.release_claim("task-b", first.id, at).await.unwrap(),
        "not b's"
    );
    assert!(store.release_claim("task-a", first.id, at).await.unwrap());
    assert!(
        !store.release_claim("task-a", first.id, at).await.unwrap(),
        "already released"
    );
    assert!(
        !store.release_claim("task-a", short.id, at).await.unwrap(),
        "expired"
    );
    assert_eq!(
        store.live_claims("/srv/repo", at).await.unwrap(),
        vec![second.clone(), theirs.clone()]
    );
    assert_eq!(
        store.release_claims("task-a", at).await.unwrap(),
        1,
        "only the live one counts"
    );
    assert_eq!(
        store.live_claims("/srv/repo", at).await.unwrap(),
        vec![theirs]
    );
    assert_eq!(store.release_claims("task-a", at).await.unwrap(), 0);
}

async fn claims_on_paths_are_the_other_workspaces_ones_that_cover_them(store: &dyn AuditStore) {
    let t0 = now();
    let mine = claim_at("task-a", &["src/a.py"], 60, t0);
    let theirs = claim_at("task-b", &["src/*.py", "docs/**"], 60, t0);
    let expired = claim_at("task-c", &["README"], 1, t0);
    for claim in [&mine, &theirs, &expired] {
        store.insert_claim(claim).await.unwrap();
    }
    let at = t0 + TimeDelta::seconds(2);

    let found = store
        .claims_on(
            "/srv/repo",
            "task-a",
            &["src/a.py", "src/deep/b.py", "docs/x/y.md", "README"],
            at,
        )
        .await
        .unwrap();
    let got: Vec<(&str, &str, Uuid)> = found
        .iter()
        .map(|c| (c.path.as_str(), c.pattern.as_str(), c.claim.id))
        .collect();
    assert_eq!(
        got,
        [
            ("src/a.py", "src/*.py", theirs.id),
            ("docs/x/y.md", "docs/**", theirs.id),
        ],
        "its own claim and an expired one refuse nothing; `*` stays in its directory"
    );
    let for_b = store
        .claims_on("/srv/repo", "task-b", &["src/a.py"], at)
        .await
        .unwrap();
    assert_eq!(for_b.len(), 1);
    assert_eq!(for_b[0].claim, mine);
    assert!(
        store
            .claims_on("/srv/another", "task-a", &["src/a.py"], at)
            .await
            .unwrap()
            .is_empty(),
        "another repository's workspaces do not see them"
    );
}

async fn deleting_a_workspace_releases_its_claims(store: &dyn AuditStore) {
    store
        .create_workspace(&workspace_record("task-a", WorkspaceKind::GitWorktree))
        .await
        .unwrap();
    let t0 = now();
    let gone = claim_at("task-a", &["a.py"], 60, t0);
    let kept = claim_at("task-b", &["b.py"], 60, t0);
    store.insert_claim(&gone).await.unwrap();
    store.insert_claim(&kept).await.unwrap();

    use writ_core::workspace_registry::WorkspaceDeletion;
    assert_eq!(
        store.delete_workspace("task-a").await.unwrap(),
        WorkspaceDeletion::Deleted
    );

    assert_eq!(
        store.live_claims("/srv/repo", t0).await.unwrap(),
        vec![kept]
    );
}

// ---------------------------------------------------------------------------------------------
// Change sets

/// A change set of key `alice` in `workspace` proposing `a.py` (over `x = 1`) and a new `b.py`,
/// with its writes: the request that proposes it, its operations, the set, its first event.
fn change_proposal(
    workspace: &str,
    ttl: Duration,
) -> (writ_core::changes::ChangeSet, Vec<AuditWrite>) {
    use writ_core::changes::{ProposedFile, Proposer, propose};
    let mut req = new_request(Some("alice"), None);
    req.workspace = workspace.to_owned();
    let by = Proposer {
        change_id: Uuid::now_v7(),
        request_id: req.id,
        route: "POST /write_codebase".into(),
        caller: Some("alice".into()),
        workspace: workspace.to_owned(),
        summary: Some("two files".into()),
        commit: Some(true),
        ttl,
    };
    let files = vec![
        ProposedFile {
            path: writ_core::RepoPath::parse("a.py").unwrap(),
            kind: FileKind::Code,
            base: Some(b"x = 1\n".to_vec()),
            content: b"x = 2\n".to_vec(),
            provenance: writ_core::files::Provenance {
                chosen_model: Some("m1".into()),
                candidates: candidates(),
                ..Default::default()
            },
        },
        ProposedFile {
            path: writ_core::RepoPath::parse("b.py").unwrap(),
            kind: FileKind::Code,
            base: None,
            content: b"y = 1\n".to_vec(),
            provenance: writ_core::files::Provenance::default(),
        },
    ];
    let made = propose(by, files);
    let mut writes = vec![AuditWrite::InsertRequest(req)];
    writes.extend(made.writes);
    (made.change.unwrap(), writes)
}

fn decision(
    seq: i64,
    kind: writ_core::changes::DecisionKind,
    path: &str,
    hunks: Vec<String>,
) -> writ_core::changes::Decision {
    writ_core::changes::Decision {
        seq,
        kind,
        request_id: Uuid::now_v7(),
        at: now(),
        caller: Some("alice".into()),
        comment: Some("looks right".into()),
        files: vec![writ_core::changes::DecidedFile {
            path: path.into(),
            hunks,
            sha256: Some("ab".repeat(32)),
            operation_id: Some(Uuid::now_v7()),
            rebased: false,
        }],
    }
}

async fn a_change_set_round_trips_with_its_files_contents_and_decisions(store: &dyn AuditStore) {
    use writ_core::changes::{ChangeState, DecisionKind};
    let (set, writes) = change_proposal("default", Duration::from_secs(3600));
    store.commit(writes).await.unwrap();

    let read = store.get_change(set.id).await.unwrap().unwrap();
    assert_eq!(read.files, set.files);
    assert_eq!(read.caller.as_deref(), Some("alice"));
    assert_eq!(read.summary.as_deref(), Some("two files"));
    assert_eq!(read.commit, Some(true));
    assert_eq!(
        read.expires_at.timestamp_micros(),
        set.expires_at.timestamp_micros()
    );
    assert!(read.decisions.is_empty());
    let contents = store.change_contents(set.id).await.unwrap();
    assert_eq!(contents.len(), 2);
    assert_eq!(contents[0].base.as_deref(), Some(&b"x = 1\n"[..]));
    assert_eq!(contents[0].content, b"x = 2\n");
    assert_eq!(contents[1].base, None);
    // The proposal's operations hold the contents and the candidates, counted like any write's.
    let ops = store
        .list_operations(
            &OperationFilter {
                request_id: Some(set.request_id),
                ..OperationFilter::default()
            },
            None,
            10,
        )
        .await
        .unwrap()
        .operations;
    assert_eq!(ops.len(), 2);
    assert!(ops.iter().all(|op| op.operation == OperationKind::Proposed));
    let (_, content) = store
        .get_operation(set.files[0].operation_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(content.as_deref(), Some(&b"x = 2\n"[..]));
    let events = store.job_events(set.id, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "change_proposed");

    let first = decision(
        1,
        DecisionKind::Applied,
        "a.py",
        vec![set.files[0].hunks[0].id.clone()],
    );
    store
        .commit(vec![AuditWrite::DecideChange {
            change_id: set.id,
            decision: first.clone(),
            state: ChangeState::PartiallyApplied,
            undecided: 1,
        }])
        .await
        .unwrap();
    let read = store.get_change(set.id).await.unwrap().unwrap();
    assert_eq!(read.decisions.len(), 1);
    assert_eq!(read.decisions[0].files, first.files);
    assert_eq!(read.decisions[0].comment.as_deref(), Some("looks right"));
    assert_eq!(read.state(now()), ChangeState::PartiallyApplied);
}

async fn of_two_decisions_on_one_version_one_lands_and_the_other_changes_nothing(
    store: &dyn AuditStore,
) {
    use writ_core::changes::{ChangeState, DecisionKind};
    let (set, writes) = change_proposal("default", Duration::from_secs(3600));
    store.commit(writes).await.unwrap();
    let hunk = set.files[1].hunks[0].id.clone();
    let taking = |kind, file: &str| {
        let mut req = new_request(Some("alice"), None);
        req.route = "POST /changes/{id}/apply".into();
        let mut op = operation(req.id, file);
        op.operation = OperationKind::Rejected;
        op.status = OperationStatus::Succeeded;
        vec![
            AuditWrite::InsertRequest(req),
            AuditWrite::InsertOperation {
                operation: op,
                content: None,
            },
            AuditWrite::DecideChange {
                change_id: set.id,
                decision: decision(1, kind, "b.py", vec![hunk.clone()]),
                state: ChangeState::Open,
                undecided: 1,
            },
        ]
    };
    let (one, two) = futures::join!(
        store.commit(taking(DecisionKind::Applied, "b.py")),
        store.commit(taking(DecisionKind::Rejected, "b.py"))
    );
    let refused = match (one, two) {
        (Ok(()), Err(e)) | (Err(e), Ok(())) => e,
        other => panic!("exactly one decision must land, got {other:?}"),
    };
    assert!(matches!(refused, StoreError::Conflict(_)), "{refused}");
    let read = store.get_change(set.id).await.unwrap().unwrap();
    assert_eq!(read.decisions.len(), 1);
    // The loser's request and operation went with it.
    let ops = list_all(
        store,
        &OperationFilter {
            filename: Some("b.py".into()),
            status: Some(OperationStatus::Succeeded),
            ..OperationFilter::default()
        },
    )
    .await;
    assert_eq!(ops.len(), 2, "the proposal's and the winner's");
}

async fn a_withdrawn_decision_leaves_its_number_and_its_event_free(store: &dyn AuditStore) {
    use writ_core::changes::{ChangeState, DecisionKind};
    let (set, writes) = change_proposal("default", Duration::from_secs(3600));
    store.commit(writes).await.unwrap();
    let decide = |request| {
        let mut d = decision(
            1,
            DecisionKind::Applied,
            "b.py",
            vec![set.files[1].hunks[0].id.clone()],
        );
        d.request_id = request;
        vec![
            AuditWrite::DecideChange {
                change_id: set.id,
                decision: d,
                state: ChangeState::PartiallyApplied,
                undecided: 1,
            },
            AuditWrite::AppendEvents(vec![writ_core::jobs::JobEvent {
                job_id: set.id,
                seq: 2,
                created_at: now(),
                name: "change_applied".into(),
                data: json!({}),
            }]),
        ]
    };
    let first = Uuid::now_v7();
    store.commit(decide(first)).await.unwrap();
    store
        .commit(vec![AuditWrite::WithdrawDecision {
            change_id: set.id,
            seq: 1,
            state: ChangeState::Open,
            undecided: 2,
        }])
        .await
        .unwrap();
    let read = store.get_change(set.id).await.unwrap().unwrap();
    assert!(read.decisions.is_empty());
    assert_eq!(store.job_events(set.id, 0, 10).await.unwrap().len(), 1);
    let second = Uuid::now_v7();
    store.commit(decide(second)).await.unwrap();
    let read = store.get_change(set.id).await.unwrap().unwrap();
    assert_eq!(read.decisions[0].request_id, second);
}

async fn change_sets_list_newest_first_by_workspace_caller_and_openness(store: &dyn AuditStore) {
    use writ_core::changes::{ChangeFilter, ChangeState, DecisionKind};
    let (older, writes) = change_proposal("default", Duration::from_secs(3600));
    store.commit(writes).await.unwrap();
    let (expired, writes) = change_proposal("default", Duration::ZERO);
    store.commit(writes).await.unwrap();
    let (decided, writes) = change_proposal("default", Duration::from_secs(3600));
    store.commit(writes).await.unwrap();
    let all: Vec<String> = decided
        .files
        .iter()
        .flat_map(|f| f.hunks.iter().map(|h| h.id.clone()))
        .collect();
    let mut d = decision(1, DecisionKind::Rejected, "a.py", all[..1].to_vec());
    d.files.push(writ_core::changes::DecidedFile {
        path: "b.py".into(),
        hunks: all[1..].to_vec(),
        sha256: None,
        operation_id: None,
        rebased: false,
    });
    store
        .commit(vec![AuditWrite::DecideChange {
            change_id: decided.id,
            decision: d,
            state: ChangeState::Rejected,
            undecided: 0,
        }])
        .await
        .unwrap();
    let (elsewhere, writes) = change_proposal("other", Duration::from_secs(3600));
    store.commit(writes).await.unwrap();

    let list = |filter: ChangeFilter| async move {
        store
            .list_changes(&filter, 10)
            .await
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect::<Vec<_>>()
    };
    let every = ChangeFilter {
        workspace: "default".into(),
        ..ChangeFilter::default()
    };
    assert_eq!(
        list(every.clone()).await,
        vec![decided.id, expired.id, older.id]
    );
    assert_eq!(
        list(ChangeFilter {
            open_at: Some(now()),
            ..every.clone()
        })
        .await,
        vec![older.id]
    );
    assert!(
        list(ChangeFilter {
            caller: Some("bob".into()),
            ..every.clone()
        })
        .await
        .is_empty()
    );
    assert_eq!(
        list(ChangeFilter {
            workspace: "other".into(),
            ..every
        })
        .await,
        vec![elsewhere.id]
    );
    let listed = store
        .list_changes(
            &ChangeFilter {
                workspace: "default".into(),
                ..ChangeFilter::default()
            },
            1,
        )
        .await
        .unwrap();
    assert_eq!(
        listed[0].decisions.len(),
        1,
        "a listed set carries its decisions"
    );
    assert_eq!(listed[0].files.len(), 2);
}
