//! Schemathesis (PyPI), run against a live API from `openapi/v1.json`.
//! Installed by `bash deploy/install-schemathesis.sh`; a missing one fails
//! the test with that command, never skips it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `$PAYWATCH_SCHEMATHESIS`, else the venv install-schemathesis.sh makes.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("PAYWATCH_SCHEMATHESIS") {
        return PathBuf::from(p);
    }
    let tools =
        std::env::var("PAYWATCH_TOOLS").unwrap_or_else(|_| "/var/cache/paywatch-tools".to_owned());
    Path::new(&tools).join("schemathesis/bin/schemathesis")
}

pub struct Run<'a> {
    pub base: &'a str,
    pub token: &'a str,
    pub max_examples: u32,
    pub seed: u64,
    /// Extra arguments: exclusions while a finding is open.
    pub extra: &'a [&'a str],
}

pub struct Outcome {
    pub passed: bool,
    pub output: String,
    pub took: Duration,
}

impl Run<'_> {
    /// Runs to the end; blocking, so call it off the runtime serving the API.
    pub fn run(&self) -> Outcome {
        let bin = binary();
        assert!(
            bin.is_file(),
            "schemathesis is not installed at {}: run `bash deploy/install-schemathesis.sh` \
             (or set PAYWATCH_SCHEMATHESIS)",
            bin.display()
        );
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let schema = repo.join("openapi/v1.json");
        // The checks, and any operation left out of one while a finding is
        // open: in a file, since a check named with --checks would override
        // an operation's exclusion.
        let config = repo.join("tests/api_contract.toml");
        // Its example database and reports go here, not into the repository.
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let out = Command::new(&bin)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .arg("--config-file")
            .arg(&config)
            .arg("run")
            .arg(&schema)
            .args(["--url", self.base])
            .args(["--header", &format!("Authorization: Bearer {}", self.token)])
            .args(["--mode", "all"])
            .args(["--max-examples", &self.max_examples.to_string()])
            .args(["--seed", &self.seed.to_string()])
            // One: Python 3.11 (Debian 12's) may fail Hypothesis with
            // "AST constructor recursion depth mismatch" when two workers
            // parse at once; and the API under test shares two cores.
            .args(["--workers", "1"])
            .args(["--request-timeout", "30"])
            .args(["--generation-database", "none"])
            .arg("--no-color")
            .args(self.extra)
            .output()
            .unwrap_or_else(|e| panic!("{} does not run: {e}", bin.display()));
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Outcome {
            passed: out.status.success(),
            output,
            took: started.elapsed(),
        }
    }
}
