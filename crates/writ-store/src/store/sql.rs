//! The statements' building blocks: [`Sql`] (SQL text and the values bound into it, run on a
//! pooled or a kept connection) and [`Record`] (a row read back by column name), over the
//! backend's [`Dialect`].

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::{Database, QueryBuilder};
use writ_core::StoreError;

use super::SqlStore;
use crate::dialect::{Binds, BoxFuture, Dialect, Reads};
use crate::error::from_sqlx;
use crate::listing::parse_column;

/// A statement being built: SQL text and the values bound into it, in order.
pub(super) struct Sql<D: Dialect>(QueryBuilder<D>);

impl<D: Dialect> Sql<D> {
    pub(super) fn new(sql: &str) -> Self {
        Self(QueryBuilder::new(sql))
    }

    pub(super) fn push(&mut self, sql: &str) -> &mut Self {
        self.0.push(sql);
        self
    }

    /// Binds `value` as the next parameter (its placeholder goes where the SQL has got to).
    pub(super) fn bind<'a, T: 'a>(&mut self, value: T) -> &mut Self
    where
        D: Binds<'a, T>,
    {
        D::bind_value(&mut self.0, value);
        self
    }

    /// Binds a point in time, or NULL, in the backend's representation.
    pub(super) fn bind_time(&mut self, at: impl Into<Option<DateTime<Utc>>>) -> &mut Self {
        D::bind_time(&mut self.0, at.into());
        self
    }

    /// `( … )` around the values `bind_each` binds, with commas between them.
    pub(super) fn tuple(&mut self, bind_each: impl FnOnce(&mut Tuple<'_, D>)) -> &mut Self {
        self.push("(");
        bind_each(&mut Tuple {
            sql: self,
            first: true,
        });
        self.push(")")
    }

    /// Runs a write on `conn` (a transaction's, say) and says how many rows it changed.
    pub(super) async fn execute_on(
        self,
        conn: &mut D::Connection,
        what: &str,
    ) -> Result<u64, StoreError> {
        let done = self.run_on(conn, what, D::execute).await?;
        Ok(D::rows_affected(&done))
    }

    /// Runs a write on a pooled connection and says how many rows it changed.
    pub(super) async fn execute(self, store: &SqlStore<D>, what: &str) -> Result<u64, StoreError> {
        let done = self.run(store, what, D::execute).await?;
        Ok(D::rows_affected(&done))
    }

    pub(super) async fn fetch_all(
        self,
        store: &SqlStore<D>,
        what: &str,
    ) -> Result<Vec<D::Row>, StoreError> {
        self.run(store, what, D::fetch_all).await
    }

    pub(super) async fn fetch_optional(
        self,
        store: &SqlStore<D>,
        what: &str,
    ) -> Result<Option<D::Row>, StoreError> {
        self.run(store, what, D::fetch_optional).await
    }

    pub(super) async fn run<T>(
        self,
        store: &SqlStore<D>,
        what: &str,
        run: Run<D, T>,
    ) -> Result<T, StoreError> {
        let mut conn = store.connection(what).await?;
        self.run_on(&mut conn, what, run).await
    }

    pub(super) async fn run_on<T>(
        mut self,
        conn: &mut D::Connection,
        what: &str,
        run: Run<D, T>,
    ) -> Result<T, StoreError> {
        run(conn, &mut self.0)
            .await
            .map_err(|err| from_sqlx(what, err))
    }
}

/// One of [`crate::dialect::Executes`]'s ways to run a statement.
type Run<D, T> = for<'e> fn(
    &'e mut <D as Database>::Connection,
    &'e mut QueryBuilder<D>,
) -> BoxFuture<'e, Result<T, sqlx::Error>>;

/// The values of one `( … )` tuple, separated by commas.
pub(super) struct Tuple<'s, D: Dialect> {
    sql: &'s mut Sql<D>,
    first: bool,
}

impl<D: Dialect> Tuple<'_, D> {
    pub(super) fn separate(&mut self) -> &mut Sql<D> {
        if !std::mem::take(&mut self.first) {
            self.sql.push(", ");
        }
        self.sql
    }

    pub(super) fn bind<'a, T: 'a>(&mut self, value: T) -> &mut Self
    where
        D: Binds<'a, T>,
    {
        self.separate().bind(value);
        self
    }

    pub(super) fn bind_time(&mut self, at: impl Into<Option<DateTime<Utc>>>) -> &mut Self {
        self.separate().bind_time(at);
        self
    }

    /// A value the database computes: `before`, the bound `value`, `after` (a scalar subquery).
    pub(super) fn computed<'a, T: 'a>(&mut self, before: &str, value: T, after: &str) -> &mut Self
    where
        D: Binds<'a, T>,
    {
        self.separate().push(before).bind(value).push(after);
        self
    }
}

/// One row read back, by column name.
pub(super) struct Record<'r, D: Dialect>(pub(super) &'r D::Row);

impl<D: Dialect> Record<'_, D> {
    pub(super) fn get<T>(&self, column: &str) -> Result<T, StoreError>
    where
        D: Reads<T>,
    {
        D::read_value(self.0, column)
    }

    /// A NOT NULL timestamp column.
    pub(super) fn time(&self, column: &str) -> Result<DateTime<Utc>, StoreError> {
        self.optional_time(column)?
            .ok_or_else(|| StoreError::Other(format!("column {column}: unexpected NULL")))
    }

    pub(super) fn optional_time(&self, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        D::read_time(self.0, column)
    }

    /// A text column holding an enum's `as_str`.
    pub(super) fn parse<T>(&self, column: &str) -> Result<T, StoreError>
    where
        T: FromStr<Err = String>,
    {
        parse_column(column, &self.get::<String>(column)?)
    }
}
