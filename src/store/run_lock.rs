//! SQLite is single-instance: one `paywatch run` per database file. Two
//! would each run every watcher and the reconciler against one file, and
//! SQLite has no row locks to keep them apart (several instances are what
//! PostgreSQL is for). The lock is an OS file lock beside the database, so
//! it goes with the process however that ends, SIGKILL included: no stale
//! lock to clear by hand.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a start waits for the lock: a restart in the same process (or a
/// supervisor's quick restart) may find the old holder just letting go.
const WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunLockError {
    #[error(
        "another paywatch run (pid {holder}) is using the SQLite database {database}; SQLite is \
         single-instance: stop that one first, or use PostgreSQL to run several instances \
         (lock file {lock})"
    )]
    Held {
        database: String,
        lock: String,
        holder: String,
    },
    #[error("cannot lock {lock} for the SQLite database: {error}")]
    Io { lock: String, error: std::io::Error },
}

/// Held while `paywatch run` runs on a SQLite file; released on drop.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Takes the run lock of the SQLite database at `url`. `None` for
    /// PostgreSQL and for in-memory SQLite, which no other process can open.
    pub async fn acquire(url: &str) -> Result<Option<RunLock>, RunLockError> {
        let Some(database) = sqlite_file(url) else {
            return Ok(None);
        };
        let lock = lock_path(&database);
        let io = |error| RunLockError::Io {
            lock: lock.display().to_string(),
            error,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock)
            .map_err(io)?;
        let deadline = Instant::now() + WAIT;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.read_to_string(&mut holder);
                    let holder = holder.trim();
                    return Err(RunLockError::Held {
                        database: database.display().to_string(),
                        lock: lock.display().to_string(),
                        holder: if holder.is_empty() { "unknown" } else { holder }.to_owned(),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        // Who holds it, for the message a second start prints.
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(Some(RunLock { _file: file }))
    }
}

/// The file of a `sqlite:` URL, if it names one.
fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let path = rest.split('?').next().unwrap_or("");
    if path.is_empty() || path == ":memory:" || url.contains("mode=memory") {
        return None;
    }
    Some(PathBuf::from(path))
}

fn lock_path(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push(".run-lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sqlite_files_are_locked() {
        assert_eq!(
            sqlite_file("sqlite:///var/lib/paywatch/p.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/paywatch/p.db"))
        );
        assert_eq!(sqlite_file("sqlite://p.db"), Some(PathBuf::from("p.db")));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("sqlite://file.db?mode=memory"), None);
        assert_eq!(sqlite_file("postgres://u@h/db"), None);
    }

    #[tokio::test]
    async fn a_second_holder_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("p.db").display());
        let first = RunLock::acquire(&url).await.unwrap();
        assert!(first.is_some());
        let err = RunLock::acquire(&url).await.unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id()))
                && err.contains("single-instance")
                && err.contains("p.db"),
            "{err}"
        );
        drop(first);
        assert!(RunLock::acquire(&url).await.unwrap().is_some());
    }
}
