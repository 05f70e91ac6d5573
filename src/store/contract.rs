//! The storefront's read contract (`contract/storefront.json`) written onto
//! the views as PostgreSQL comments, so `\d+ paywatch_intents` in psql (or
//! any schema browser) explains each column where the storefront reads it.

use serde::Deserialize;
use sqlx::Row;

use super::{Dialect, Store, StoreError};

const SPEC: &str = include_str!("../../contract/storefront.json");

#[derive(Debug, Deserialize)]
struct Spec {
    views: Vec<ViewSpec>,
}

#[derive(Debug, Deserialize)]
struct ViewSpec {
    name: String,
    about: String,
    columns: Vec<ColumnSpec>,
}

#[derive(Debug, Deserialize)]
struct ColumnSpec {
    name: String,
    meaning: String,
    example: Option<String>,
}

impl ColumnSpec {
    fn comment(&self) -> String {
        match &self.example {
            Some(e) => format!("{} Example: {e}", self.meaning),
            None => self.meaning.clone(),
        }
    }
}

/// A string literal for SQL: the text is ours, quoted all the same.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl Store {
    /// Comments each contract view and column whose comment differs from
    /// the specification; a database already up to date gets one read.
    pub(crate) async fn comment_contract(&self) -> Result<(), StoreError> {
        if self.dialect() != Dialect::Postgres {
            return Ok(());
        }
        let spec: Spec = serde_json::from_str(SPEC)
            .map_err(|e| StoreError::Corrupt(format!("contract/storefront.json: {e}")))?;
        let rows = sqlx::query(
            "SELECT CAST(c.relname AS TEXT) AS view, CAST(a.attname AS TEXT) AS col, \
                    COALESCE(col_description(c.oid, a.attnum), '') AS comment \
             FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema() \
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             WHERE c.relkind = 'v' AND c.relname LIKE 'paywatch%' \
             UNION ALL \
             SELECT CAST(c.relname AS TEXT), '', COALESCE(obj_description(c.oid, 'pg_class'), '') \
             FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema() \
             WHERE c.relkind = 'v' AND c.relname LIKE 'paywatch%'",
        )
        .fetch_all(self.pool())
        .await?;
        let mut have = std::collections::HashMap::new();
        for r in &rows {
            let view: String = r.try_get("view")?;
            let col: String = r.try_get("col")?;
            let comment: String = r.try_get("comment")?;
            have.insert((view, col), comment);
        }
        let mut statements = Vec::new();
        for v in &spec.views {
            if have.get(&(v.name.clone(), String::new())) != Some(&v.about) {
                statements.push(format!(
                    "COMMENT ON VIEW {} IS {}",
                    v.name,
                    literal(&v.about)
                ));
            }
            for c in &v.columns {
                let want = c.comment();
                if have.get(&(v.name.clone(), c.name.clone())) != Some(&want) {
                    statements.push(format!(
                        "COMMENT ON COLUMN {}.{} IS {}",
                        v.name,
                        c.name,
                        literal(&want)
                    ));
                }
            }
        }
        if statements.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool().begin().await?;
        for s in statements {
            sqlx::query(&s).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}
