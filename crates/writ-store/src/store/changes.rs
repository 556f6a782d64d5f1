//! [`ChangeStore`] for both backends (schema: postgres 0025, sqlite 0020), and the statements
//! of the change-set writes the group commit carries (`ProposeChange`, `DecideChange`,
//! `WithdrawDecision`).
//!
//! A decision is a row of `change_decisions` numbered per set: its primary key is what refuses
//! the second of two decisions taken on the same version (a unique violation, which the store
//! answers as [`StoreError::Conflict`]).

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::types::Json;
use uuid::Uuid;
use writ_core::StoreError;
use writ_core::audit::AuditWrite;
use writ_core::changes::{
    ChangeFile, ChangeFilter, ChangeSet, ChangeStore, Decision, FileContents, Hunk,
};
use writ_core::files::Provenance;

use super::{Record, Sql, SqlStore};
use crate::dialect::Dialect;

// Macros, not consts, so the statements stay static strings (never format! into SQL).
macro_rules! set_columns {
    () => {
        "id, request_id, route, caller, workspace, created_at, expires_at, summary, git_commit"
    };
}
macro_rules! file_columns {
    () => {
        "change_id, position, path, kind, base_sha256, sha256, bytes, hunks, provenance, \
         operation_id"
    };
}

/// The tables a change-set write touches, one statement part each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChangeTable {
    Sets,
    Files,
    Decisions,
    Events,
}

impl ChangeTable {
    pub(super) fn name(self) -> &'static str {
        match self {
            ChangeTable::Sets => "change_sets",
            ChangeTable::Files => "change_files",
            ChangeTable::Decisions => "change_decisions",
            ChangeTable::Events => "job_events",
        }
    }

    /// The tables `write` touches, in the order they are written.
    pub(super) fn of(write: &AuditWrite) -> &'static [ChangeTable] {
        match write {
            AuditWrite::ProposeChange { .. } => &[ChangeTable::Sets, ChangeTable::Files],
            AuditWrite::DecideChange { .. } => &[ChangeTable::Decisions, ChangeTable::Sets],
            AuditWrite::WithdrawDecision { .. } => &[
                ChangeTable::Decisions,
                ChangeTable::Events,
                ChangeTable::Sets,
            ],
            _ => &[],
        }
    }
}

/// How many rows the part of `write` on `table` changes, or `None` when any count will do.
pub(super) fn expected_rows(write: &AuditWrite, table: ChangeTable) -> Option<(u64, String)> {
    match (write, table) {
        (AuditWrite::ProposeChange { .. }, ChangeTable::Sets) => {
            Some((1, "the change set was not recorded".into()))
        }
        (AuditWrite::ProposeChange { change, .. }, ChangeTable::Files) => Some((
            change.files.len() as u64,
            "the change set's files were not recorded".into(),
        )),
        (AuditWrite::DecideChange { change_id, .. }, ChangeTable::Sets) => {
            Some((1, format!("no change set {change_id}")))
        }
        (AuditWrite::DecideChange { change_id, .. }, ChangeTable::Decisions) => Some((
            1,
            format!("the decision on change set {change_id} was not recorded"),
        )),
        _ => None,
    }
}

/// The SQL of the part of `write` on `table`.
pub(super) fn push_part<D: Dialect>(sql: &mut Sql<D>, write: &AuditWrite, table: ChangeTable) {
    match (write, table) {
        (AuditWrite::ProposeChange { change, .. }, ChangeTable::Sets) => {
            sql.push(concat!(
                "INSERT INTO change_sets (",
                set_columns!(),
                ", state, undecided, decisions) VALUES "
            ));
            sql.tuple(|row| {
                row.bind(change.id)
                    .bind(change.request_id)
                    .bind(change.route.as_str())
                    .bind(change.caller.as_deref())
                    .bind(change.workspace.as_str())
                    .bind_time(change.created_at)
                    .bind_time(change.expires_at)
                    .bind(change.summary.as_deref())
                    .bind(change.commit)
                    .bind(change.state(change.created_at).as_str())
                    .bind(change.undecided() as i64)
                    .bind(0_i64);
            });
        }
        (AuditWrite::ProposeChange { change, contents }, ChangeTable::Files) => {
            sql.push(concat!(
                "INSERT INTO change_files (",
                file_columns!(),
                ", base, content) VALUES "
            ));
            for (i, f) in change.files.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                let stored = contents.iter().find(|c| c.path == f.path);
                let hunks = json(&f.hunks);
                let provenance = json(&f.provenance);
                sql.tuple(|row| {
                    row.bind(change.id)
                        .bind(i as i64)
                        .bind(f.path.as_str())
                        .bind(f.kind.as_str())
                        .bind(f.base_sha256.as_deref())
                        .bind(f.sha256.as_str())
                        .bind(f.bytes as i64)
                        .bind(Json(&hunks))
                        .bind(Json(&provenance))
                        .bind(f.operation_id)
                        .bind(stored.and_then(|c| c.base.as_deref()))
                        .bind(stored.map_or(&[][..], |c| c.content.as_slice()));
                });
            }
        }
        (
            AuditWrite::DecideChange {
                change_id,
                decision,
                ..
            },
            ChangeTable::Decisions,
        ) => {
            sql.push("INSERT INTO change_decisions (change_id, seq, decided_at, decision) VALUES ");
            let decision_json = json(decision);
            sql.tuple(|row| {
                row.bind(*change_id)
                    .bind(decision.seq)
                    .bind_time(decision.at)
                    .bind(Json(&decision_json));
            });
        }
        (
            AuditWrite::DecideChange {
                change_id,
                decision,
                state,
                undecided,
            },
            ChangeTable::Sets,
        ) => {
            sql.push("UPDATE change_sets SET state = ")
                .bind(state.as_str())
                .push(", undecided = ")
                .bind(*undecided as i64)
                .push(", decisions = ")
                .bind(decision.seq)
                .push(" WHERE id = ")
                .bind(*change_id);
        }
        (AuditWrite::WithdrawDecision { change_id, seq, .. }, ChangeTable::Decisions) => {
            sql.push("DELETE FROM change_decisions WHERE change_id = ")
                .bind(*change_id)
                .push(" AND seq = ")
                .bind(*seq);
        }
        (AuditWrite::WithdrawDecision { change_id, seq, .. }, ChangeTable::Events) => {
            // Decision `seq` announced itself as the set's event `seq + 1`.
            sql.push("DELETE FROM job_events WHERE job_id = ")
                .bind(*change_id)
                .push(" AND seq = ")
                .bind(*seq + 1);
        }
        (
            AuditWrite::WithdrawDecision {
                change_id,
                seq,
                state,
                undecided,
            },
            ChangeTable::Sets,
        ) => {
            sql.push("UPDATE change_sets SET state = ")
                .bind(state.as_str())
                .push(", undecided = ")
                .bind(*undecided as i64)
                .push(", decisions = ")
                .bind(*seq - 1)
                .push(" WHERE id = ")
                .bind(*change_id)
                .push(" AND decisions = ")
                .bind(*seq);
        }
        // Not a part of this write: a statement that changes nothing.
        _ => {
            sql.push("DELETE FROM change_sets WHERE FALSE");
        }
    }
}

/// A record as the JSON a column keeps (the backends bind any JSON value alike).
fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// A JSON column read back into `T`.
fn from_json<T: serde::de::DeserializeOwned>(
    column: &str,
    value: Json<serde_json::Value>,
) -> Result<T, StoreError> {
    serde_json::from_value(value.0).map_err(|e| StoreError::Other(format!("column {column}: {e}")))
}

fn set_from_row<D: Dialect>(row: &D::Row) -> Result<ChangeSet, StoreError> {
    let row = Record::<D>(row);
    Ok(ChangeSet {
        id: row.get("id")?,
        request_id: row.get("request_id")?,
        route: row.get("route")?,
        caller: row.get("caller")?,
        workspace: row.get("workspace")?,
        created_at: row.time("created_at")?,
        expires_at: row.time("expires_at")?,
        summary: row.get("summary")?,
        commit: row.get("git_commit")?,
        files: Vec::new(),
        decisions: Vec::new(),
    })
}

fn file_from_row<D: Dialect>(row: &D::Row) -> Result<(Uuid, ChangeFile), StoreError> {
    let row = Record::<D>(row);
    let hunks: Vec<Hunk> = from_json("hunks", row.get("hunks")?)?;
    let provenance: Provenance = from_json("provenance", row.get("provenance")?)?;
    Ok((
        row.get("change_id")?,
        ChangeFile {
            path: row.get("path")?,
            kind: row.parse("kind")?,
            base_sha256: row.get("base_sha256")?,
            sha256: row.get("sha256")?,
            bytes: usize::try_from(row.get::<i64>("bytes")?).unwrap_or(0),
            hunks,
            provenance,
            operation_id: row.get("operation_id")?,
        },
    ))
}

impl<D: Dialect> SqlStore<D> {
    /// The files and decisions of `sets`, filled in.
    async fn fill(&self, sets: &mut [ChangeSet]) -> Result<(), StoreError> {
        if sets.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = sets.iter().map(|s| s.id).collect();
        let mut files = Sql::<D>::new(concat!(
            "SELECT ",
            file_columns!(),
            " FROM change_files WHERE change_id IN ("
        ));
        push_ids(&mut files, &ids);
        files.push(") ORDER BY change_id, position");
        let mut decisions =
            Sql::<D>::new("SELECT change_id, decision FROM change_decisions WHERE change_id IN (");
        push_ids(&mut decisions, &ids);
        decisions.push(") ORDER BY change_id, seq");
        let files = files.fetch_all(self, "read change files").await?;
        let decisions = decisions.fetch_all(self, "read change decisions").await?;
        let at: HashMap<Uuid, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        for row in &files {
            let (id, file) = file_from_row::<D>(row)?;
            if let Some(&i) = at.get(&id) {
                sets[i].files.push(file);
            }
        }
        for row in &decisions {
            let record = Record::<D>(row);
            let id: Uuid = record.get("change_id")?;
            let decision: Decision = from_json("decision", record.get("decision")?)?;
            if let Some(&i) = at.get(&id) {
                sets[i].decisions.push(decision);
            }
        }
        Ok(())
    }
}

fn push_ids<D: Dialect>(sql: &mut Sql<D>, ids: &[Uuid]) {
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.bind(*id);
    }
}

#[async_trait]
impl<D: Dialect> ChangeStore for SqlStore<D> {
    async fn get_change(&self, id: Uuid) -> Result<Option<ChangeSet>, StoreError> {
        let mut sql = Sql::<D>::new(concat!(
            "SELECT ",
            set_columns!(),
            " FROM change_sets WHERE id = "
        ));
        sql.bind(id);
        let Some(row) = sql.fetch_optional(self, "get change set").await? else {
            return Ok(None);
        };
        let mut sets = vec![set_from_row::<D>(&row)?];
        self.fill(&mut sets).await?;
        Ok(sets.pop())
    }

    async fn list_changes(
        &self,
        filter: &ChangeFilter,
        limit: u32,
    ) -> Result<Vec<ChangeSet>, StoreError> {
        let mut sql = Sql::<D>::new(concat!(
            "SELECT ",
            set_columns!(),
            " FROM change_sets WHERE workspace = "
        ));
        sql.bind(filter.workspace.as_str());
        if let Some(caller) = &filter.caller {
            sql.push(" AND caller = ").bind(caller.as_str());
        }
        if let Some(at) = filter.open_at {
            sql.push(" AND undecided > 0 AND expires_at > ")
                .bind_time(at);
        }
        sql.push(" ORDER BY created_at DESC, id DESC LIMIT ")
            .bind(i64::from(limit));
        let rows = sql.fetch_all(self, "list change sets").await?;
        let mut sets = rows
            .iter()
            .map(set_from_row::<D>)
            .collect::<Result<Vec<_>, _>>()?;
        self.fill(&mut sets).await?;
        Ok(sets)
    }

    async fn change_contents(&self, id: Uuid) -> Result<Vec<FileContents>, StoreError> {
        let mut sql =
            Sql::<D>::new("SELECT path, base, content FROM change_files WHERE change_id = ");
        sql.bind(id).push(" ORDER BY position");
        let rows = sql.fetch_all(self, "read change contents").await?;
        rows.iter()
            .map(|row| {
                let row = Record::<D>(row);
                Ok(FileContents {
                    path: row.get("path")?,
                    base: row.get("base")?,
                    content: row.get("content")?,
                })
            })
            .collect()
    }
}
