use super::StoreError;

/// Where PostgreSQL and SQLite differ, in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    pub(crate) fn from_url(url: &str) -> Result<Dialect, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Dialect::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Dialect::Sqlite)
        } else {
            Err(StoreError::UnsupportedUrl(paywatch_core::shown_url(url)))
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        }
    }

    /// Expands the dialect markers in a query:
    /// - `NUM($n)`: a base-unit amount parameter, bound as text; NUMERIC on
    ///   PostgreSQL, kept as TEXT on SQLite (whose numbers stop at 2^63).
    /// - `FOR_UPDATE` / `FOR_SHARE` / `SKIP_LOCKED`: row locks on PostgreSQL;
    ///   SQLite has one writer at a time and needs none.
    /// - `DB_NOW_MS`: the database's clock in Unix milliseconds, for times
    ///   several instances compare (leases), so their own clocks need not agree.
    pub(crate) fn sql(self, template: &str) -> String {
        let mut out = String::with_capacity(template.len() + 32);
        let mut rest = template;
        while let Some(pos) = rest.find("NUM(") {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 4..];
            let end = after.find(')').expect("NUM( is closed");
            match self {
                Dialect::Postgres => {
                    out.push_str("CAST(");
                    out.push_str(&after[..end]);
                    out.push_str(" AS NUMERIC)");
                }
                Dialect::Sqlite => out.push_str(&after[..end]),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        match self {
            Dialect::Postgres => out
                .replace("SKIP_LOCKED", "FOR UPDATE SKIP LOCKED")
                .replace("FOR_UPDATE", "FOR UPDATE")
                .replace("FOR_SHARE", "FOR SHARE")
                .replace(
                    "DB_NOW_MS",
                    "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)",
                ),
            Dialect::Sqlite => out
                .replace("SKIP_LOCKED", "")
                .replace("FOR_UPDATE", "")
                .replace("FOR_SHARE", "")
                .replace(
                    "DB_NOW_MS",
                    "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
                ),
        }
    }
}

/// The type of a column in a [`Dialect::rowset`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    Int,
    Text,
    /// A base-unit amount, sent as a JSON string.
    Amount,
}

impl Dialect {
    /// A table expression `v` over a JSON array of objects bound as `param`:
    /// the whole batch travels as one parameter, so a statement stays the same
    /// size whatever the batch and is parsed and planned once.
    pub(crate) fn rowset(self, param: &str, columns: &[(&str, Col)]) -> String {
        match self {
            Dialect::Postgres => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|(name, col)| {
                        let ty = match col {
                            Col::Int => "bigint",
                            Col::Text => "text",
                            Col::Amount => "numeric",
                        };
                        format!("{name} {ty}")
                    })
                    .collect();
                format!(
                    "json_to_recordset(CAST({param} AS json)) AS v({})",
                    cols.join(", ")
                )
            }
            Dialect::Sqlite => {
                let cols: Vec<String> = columns
                    .iter()
                    .map(|(name, _)| format!("json_extract(value, '$.{name}') AS {name}"))
                    .collect();
                format!("(SELECT {} FROM json_each({param})) AS v", cols.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_markers_per_dialect() {
        let t = "INSERT INTO t (a) VALUES (NUM($1)) ; SELECT 1 FOR_UPDATE";
        assert_eq!(
            Dialect::Postgres.sql(t),
            "INSERT INTO t (a) VALUES (CAST($1 AS NUMERIC)) ; SELECT 1 FOR UPDATE"
        );
        assert_eq!(
            Dialect::Sqlite.sql(t),
            "INSERT INTO t (a) VALUES ($1) ; SELECT 1 "
        );
    }
}
