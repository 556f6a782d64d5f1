//! The audit path alone: operations recorded straight into the store, without writ's HTTP
//! front or the models.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;
use writ_core::audit::{
    AuditStore, FileKind, NewRequest, Operation, OperationKind, OperationOutcome, OperationStatus,
};

use super::Plan;
use crate::procs::MODELS;
use crate::stats::{Summary, millis, ms};

/// Table 4: the audit path alone — operations recorded (pending, then succeeded) per second,
/// for a tiny file and for a large one (whose content the database compresses on the commit).
pub async fn audit_path(plan: &Plan) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| backend | file (bytes) | concurrency | operations/s | per operation p50 (ms) | p99 | errors |"
    )?;
    writeln!(out, "|---|---:|---:|---:|---:|---:|---:|")?;
    let small: Arc<[u8]> = Arc::from(&b"def add(a: int, b: int) -> int:\n    return a + b\n"[..]);
    let large: Arc<[u8]> = Arc::from(large_source(LARGE_FILE_BYTES).into_bytes());
    for &backend in &plan.backends {
        let data = tempfile::tempdir()?;
        let url = backend.fresh_url(data.path()).await;
        let store = writ_store::connect(&url).await?;
        store.migrate().await?;
        for (content, concurrency) in [(&small, 1usize), (&small, 32), (&large, 1), (&large, 32)] {
            let deadline = Instant::now() + Duration::from_secs_f64(plan.audit_secs);
            let started = Instant::now();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..concurrency {
                let store = store.clone();
                let content = content.clone();
                tasks.spawn(async move {
                    let mut lat = Vec::new();
                    let mut failed = 0usize;
                    while Instant::now() < deadline {
                        match record_one(store.as_ref(), &content).await {
                            Ok(d) => lat.push(millis(d)),
                            Err(_) => failed += 1,
                        }
                    }
                    (lat, failed)
                });
            }
            let mut lat = Vec::new();
            let mut failed = 0;
            while let Some(done) = tasks.join_next().await {
                let (l, f) = done.unwrap_or_default();
                lat.extend(l);
                failed += f;
            }
            let elapsed = started.elapsed().as_secs_f64();
            let s = Summary::of(&lat);
            writeln!(
                out,
                "| {} | {} | {concurrency} | {:.0} | {} | {} | {failed} |",
                backend.name(),
                content.len(),
                lat.len() as f64 / elapsed,
                ms(s.p50),
                ms(s.p99),
            )?;
        }
    }
    Ok(out)
}

/// A large source file's size: typical of the bigger modules agents ask for.
const LARGE_FILE_BYTES: usize = 32 * 1024;

/// Python source of about `bytes` bytes, varied enough that it compresses as code does (about
/// eight to one), not as a repeated line would.
fn large_source(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes + 256);
    let mut i = 0u64;
    while text.len() < bytes {
        i += 1;
        let k = i.wrapping_mul(2_654_435_761) % 9973;
        text.push_str(&format!(
            "def handler_{i}(request: dict, limit: int = {k}) -> list[str]:\n    \"\"\"Returns the first {k} names of request {i}, sorted.\"\"\"\n    names = sorted(request.get(\"names_{}\", []))\n    return names[:limit]\n\n",
            k % 97
        ));
    }
    text
}

/// One audited write as `recorded_write` makes it, without the file: the request row once per
/// operation here (the worst case, a one-file batch), the pending operation with its content,
/// then its completion.
async fn record_one(store: &dyn AuditStore, content: &[u8]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let request_id = Uuid::now_v7();
    store
        .insert_request(&NewRequest {
            id: request_id,
            received_at: chrono::Utc::now(),
            route: "POST /write_codebase".into(),
            caller: None,
            scope: None,
            idempotency_key: None,
            body_sha256: None,
            workspace: "default".into(),
        })
        .await?;
    let op = Operation {
        id: Uuid::now_v7(),
        request_id,
        created_at: chrono::Utc::now(),
        finished_at: None,
        filename: format!("bench/{request_id}.py"),
        kind: FileKind::Code,
        operation: OperationKind::Created,
        status: OperationStatus::Pending,
        chosen_model: Some(MODELS[0].into()),
        selection: Some(writ_core::audit::Selection::Arbiter),
        arbiter_reason: Some("the most direct".into()),
        candidates: Vec::new(),
        previous_sha256: None,
        sha256: Some(writ_core::content::sha256_hex(content)),
        bytes: Some(content.len() as i64),
        error: None,
        duration_ms: None,
        detail: None,
        workspace: "default".into(),
    };
    store.insert_operation(&op, Some(content)).await?;
    store
        .complete_operation(
            op.id,
            &OperationOutcome {
                status: OperationStatus::Succeeded,
                operation: OperationKind::Created,
                error: None,
                finished_at: chrono::Utc::now(),
                duration_ms: Some(1),
            },
        )
        .await?;
    Ok(started.elapsed())
}
