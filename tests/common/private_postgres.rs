//! A PostgreSQL server of the test's own (initdb into a temporary
//! directory, its own port), so a test can crash and restart it without
//! touching the shared server every other test uses. The binaries are the
//! machine's (`/usr/lib/postgresql/<version>/bin`, installed with the
//! server by deploy/test.sh); as root the server runs as `postgres`, which
//! initdb insists on.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
}

fn bin_dir() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    found.retain(|p| p.join("initdb").exists());
    // Highest major version last.
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| {
        panic!("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin: deploy/test.sh installs them (apt postgresql)")
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let bin = bin_dir();
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success(), "chown postgres {}", dir.path().display());
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let pg = PrivatePostgres { bin, dir, port };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data().display().to_string(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        pg.up();
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd.args(args).output().expect("PostgreSQL tool runs");
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data().display().to_string();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all);
    }

    /// Starts the server and waits until it accepts connections.
    pub fn up(&self) {
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.socket_dir().display()
        );
        let log = self.dir.path().join("server.log").display().to_string();
        self.pg_ctl(&["-o", &opts, "-l", &log, "-w", "-t", "60", "start"]);
    }

    /// Stops the server as a crash would: in-flight transactions are lost,
    /// connections dropped, and the next start replays the WAL.
    pub fn crash(&self) {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
    }

    fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// `postgres://postgres@127.0.0.1:PORT`, without a database name.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}", self.port)
    }

    /// Runs `deploy/postgres-roles.sql` as the superuser, as its header says
    /// to (before `paywatch migrate` and again after it): the `paywatch`
    /// owner with password `owner-pw`, the `storefront` reader with
    /// `shop-pw`, and the `paywatch` database.
    pub fn run_roles_file(&self) {
        let roles = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/postgres-roles.sql");
        let out = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .args([
                "-v",
                "paywatch_password=owner-pw",
                "-v",
                "storefront_password=shop-pw",
            ])
            .args(["-d", &format!("{}/postgres", self.admin_url()), "-f", roles])
            .output()
            .expect("psql runs (deploy/test.sh installs it)");
        assert!(
            out.status.success(),
            "deploy/postgres-roles.sql failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data().display().to_string();
        let exe = self.bin.join("pg_ctl");
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let _ = cmd.args(["-D", &data, "-m", "immediate", "stop"]).output();
    }
}
