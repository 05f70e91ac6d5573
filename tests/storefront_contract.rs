//! The storefront's contract (issue 20, found 5): every view the storefront
//! role reads, with every column's name, order and type, is specified in
//! `contract/storefront.json`. A renamed, removed or undocumented column,
//! a missing grant or a README that no longer says what a column means
//! fails here.

#[macro_use]
mod common;

use std::collections::BTreeSet;

use common::private_postgres::PrivatePostgres;
use common::{Backend, TestDb};
use paywatch::reconcile::Reason;
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
struct Spec {
    version: i64,
    views: Vec<ViewSpec>,
}

#[derive(Debug, Deserialize)]
struct ViewSpec {
    name: String,
    columns: Vec<ColumnSpec>,
}

#[derive(Debug, Deserialize)]
struct ColumnSpec {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    nullable: bool,
    meaning: String,
    example: Option<String>,
}

fn spec() -> Spec {
    serde_json::from_str(include_str!("../contract/storefront.json"))
        .expect("contract/storefront.json parses")
}

on_both_databases!(every_storefront_view_has_exactly_the_columns_the_contract_names);

async fn every_storefront_view_has_exactly_the_columns_the_contract_names(b: Backend) {
    let db = TestDb::new(b).await;
    let pool = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let spec = spec();
    let mut problems = Vec::new();
    for v in &spec.views {
        let found: Vec<(String, String)> = match b {
            Backend::Postgres => sqlx::query_as(
                "SELECT CAST(column_name AS TEXT), CAST(data_type AS TEXT) \
                 FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = $1 \
                 ORDER BY ordinal_position",
            ),
            // SQLite's view columns carry no reliable type: names and order.
            Backend::Sqlite => {
                sqlx::query_as("SELECT name, '' FROM pragma_table_info($1) ORDER BY cid")
            }
        }
        .bind(&v.name)
        .fetch_all(&pool)
        .await
        .unwrap();
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        let specified: Vec<&str> = v.columns.iter().map(|c| c.name.as_str()).collect();
        if names != specified {
            problems.push(format!(
                "{}: the database has {names:?}, the contract {specified:?}",
                v.name
            ));
            continue;
        }
        if b == Backend::Postgres {
            for ((name, ty), c) in found.iter().zip(&v.columns) {
                if *ty != c.ty {
                    problems.push(format!(
                        "{}.{name} is {ty}, the contract says {}",
                        v.name, c.ty
                    ));
                }
                let comment: Option<String> = sqlx::query_scalar(
                    "SELECT col_description(CAST($1 AS regclass), \
                       (SELECT attnum FROM pg_attribute WHERE attrelid = CAST($1 AS regclass) \
                        AND attname = $2))",
                )
                .bind(&v.name)
                .bind(name)
                .fetch_one(&pool)
                .await
                .unwrap();
                let comment = comment.unwrap_or_default();
                if !comment.starts_with(&c.meaning) {
                    problems.push(format!(
                        "{}.{name}'s database comment is {comment:?}",
                        v.name
                    ));
                }
            }
        }
    }
    // No view the storefront might find is left out of the contract.
    let views: Vec<(String,)> = match b {
        Backend::Postgres => sqlx::query_as(
            "SELECT CAST(table_name AS TEXT) FROM information_schema.views \
             WHERE table_schema = current_schema() AND table_name LIKE 'paywatch%'",
        ),
        Backend::Sqlite => sqlx::query_as(
            "SELECT name FROM sqlite_master WHERE type = 'view' AND name LIKE 'paywatch%'",
        ),
    }
    .fetch_all(&pool)
    .await
    .unwrap();
    let in_db: BTreeSet<String> = views.into_iter().map(|(v,)| v).collect();
    let in_spec: BTreeSet<String> = spec.views.iter().map(|v| v.name.clone()).collect();
    if in_db != in_spec {
        problems.push(format!(
            "views in the database {in_db:?}, in the contract {in_spec:?}"
        ));
    }
    let version: i64 = sqlx::query_scalar("SELECT version FROM paywatch_contract")
        .fetch_one(&pool)
        .await
        .unwrap();
    if version != spec.version {
        problems.push(format!(
            "paywatch_contract says {version}, the contract file {}",
            spec.version
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_storefront_role_reads_every_contract_view_and_nothing_else() {
    let pg = PrivatePostgres::start();
    pg.run_roles_file();
    let db = TestDb::at(&format!(
        "postgres://paywatch:owner-pw@127.0.0.1:{}/paywatch",
        pg.port
    ))
    .await;
    pg.run_roles_file();
    let shop = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!(
            "postgres://storefront:shop-pw@127.0.0.1:{}/paywatch",
            pg.port
        ))
        .await
        .unwrap();
    let grants: Vec<(String, String)> = sqlx::query_as(
        "SELECT CAST(table_name AS TEXT), CAST(privilege_type AS TEXT) \
         FROM information_schema.role_table_grants WHERE grantee = 'storefront'",
    )
    .fetch_all(&shop)
    .await
    .unwrap();
    let granted: BTreeSet<(String, String)> = grants.into_iter().collect();
    let wanted: BTreeSet<(String, String)> = spec()
        .views
        .iter()
        .map(|v| (v.name.clone(), "SELECT".to_owned()))
        .collect();
    assert_eq!(
        granted, wanted,
        "the storefront may SELECT each view, and nothing else"
    );
    for v in spec().views {
        sqlx::query(&format!("SELECT * FROM {} LIMIT 1", v.name))
            .fetch_all(&shop)
            .await
            .unwrap_or_else(|e| panic!("the storefront reads {}: {e}", v.name));
    }
    let refused = sqlx::query("SELECT * FROM intents LIMIT 1")
        .fetch_all(&shop)
        .await
        .expect_err("tables stay closed");
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );
    shop.close().await;
    db.store.close().await;
}

/// The README's storefront section, one table per view.
fn readme_tables() -> Vec<(String, Vec<String>)> {
    let readme = include_str!("../README.md");
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    for line in readme.lines() {
        if let Some(name) = line
            .strip_prefix("#### `")
            .and_then(|l| l.strip_suffix('`'))
        {
            tables.push((name.to_owned(), Vec::new()));
        } else if let Some((_, rows)) = tables.last_mut() {
            if line.starts_with("| `") {
                rows.push(line.to_owned());
            }
        }
    }
    tables
}

#[test]
fn the_readme_documents_every_contract_column_and_reason_code() {
    let tables = readme_tables();
    let mut problems = Vec::new();
    for v in spec().views {
        let Some((_, rows)) = tables.iter().find(|(n, _)| *n == v.name) else {
            problems.push(format!("README has no #### `{}` table", v.name));
            continue;
        };
        for c in &v.columns {
            let null = if c.nullable { "yes" } else { "no" };
            let want = format!("| `{}` | {} | {null} |", c.name, c.ty);
            if !rows.iter().any(|r| r.starts_with(&want)) {
                problems.push(format!("README's `{}` table lacks the row {want}", v.name));
            }
            if c.meaning.trim().is_empty() {
                problems.push(format!("{}.{} has no meaning", v.name, c.name));
            }
            let _ = &c.example;
        }
    }
    let readme = include_str!("../README.md");
    for code in Reason::CODES {
        if !readme.contains(&format!("| `{code}` |")) {
            problems.push(format!("README does not explain reason code {code}"));
        }
    }
    let openapi: Value = serde_json::from_str(include_str!("../openapi/v1.json")).unwrap();
    let documented: Vec<&str> = openapi["components"]["schemas"]["Intent"]["properties"]
        ["reason_code"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if documented != Reason::CODES {
        problems.push(format!(
            "openapi/v1.json's reason codes {documented:?} differ from the code's"
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
