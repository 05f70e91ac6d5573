//! SQLite on a full disk: writes fail, cleanly and loudly, and nothing is
//! lost or doubled once space comes back. The disk is a small tmpfs mounted
//! for the test (root only: CI and the dev machines run the tests as root;
//! elsewhere the test fails saying so, it never skips).

#[macro_use]
mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::backlog::{assert_money_rules, cursor};
use common::daemon::Daemon;
use common::eth::{
    deploy_contracts, eth_settings, EthOptions, ETH_FOR_100_USD, ETH_PAYER, STABLE_FOR_100_USD,
    TOKEN_HOLDER,
};
use common::TestDb;
use paywatch::reconcile::Status;
use paywatch_core::Network;
use paywatch_testkit::{AnvilNode, AnvilOptions};

/// A tmpfs of `mib` MiB, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mib: u32) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount runs");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs to fill it, which needs root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file until the disk refuses more.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).and_then(|_| f.flush()).is_ok() {}
        // Smaller pieces, to the last byte.
        while f.write_all(&chunk[..512]).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: the daemon's last connections may still be closing.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_sqlite_writes_and_loses_nothing_once_space_returns() {
    let disk = SmallDisk::mount(24);
    let node = AnvilNode::start(AnvilOptions::default())
        .await
        .unwrap_or_else(|e| panic!("anvil: {e}"));
    let contracts = deploy_contracts(&node).await;
    let db = TestDb::sqlite_at(&disk.path().join("paywatch.db")).await;
    let store = db.store.clone();
    let mut settings = eth_settings(&db.url, &node, &contracts, &EthOptions::default());
    settings.networks.get_mut("ethereum").unwrap().traces = false;
    let daemon = Daemon::start(db, settings).await;
    daemon.wait_cursor(node.block_number().await.unwrap()).await;
    let eth = daemon.create_in("ETH", "topup", "before-full", "100").await;
    let usdt = daemon.create_in("USDT", "topup", "while-full", "100").await;
    let usdc = daemon
        .create_in("USDC", "topup", "also-while-full", "100")
        .await;
    node.send_eth(ETH_PAYER, &eth.address, ETH_FOR_100_USD)
        .await
        .unwrap();
    daemon
        .wait_for(eth.id, "confirming", |r| r.status == Status::Confirming)
        .await;

    let filler = disk.fill();
    node.token_transfer(
        &contracts.usdt,
        TOKEN_HOLDER,
        &usdt.address,
        STABLE_FOR_100_USD,
    )
    .await
    .unwrap();
    node.token_transfer(
        &contracts.usdc,
        TOKEN_HOLDER,
        &usdc.address,
        STABLE_FOR_100_USD,
    )
    .await
    .unwrap();
    node.mine(3_000).await.unwrap();
    let tip = node.block_number().await.unwrap();
    // Caught up in well under a second when it can write; stuck short of
    // the tip while the disk is full.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stuck = cursor(&store, Network::Ethereum).await;
    assert!(
        stuck < tip,
        "the watcher wrote 3,000 blocks to a full disk ({stuck} of {tip})"
    );
    // A new intent is refused with the reason, not half made.
    let refused = daemon
        .ctx
        .intents
        .create(&paywatch::intents::NewIntent {
            kind: "order".into(),
            reference: "no-room".into(),
            account: "acct-1".into(),
            asset: "ETH".into(),
            network: "ethereum".into(),
            usd_amount: "100".into(),
        })
        .await;
    match refused {
        Err(e) => assert!(
            e.to_string().contains("full"),
            "the error says the disk is full: {e}"
        ),
        Ok(i) => panic!("an intent was made on a full disk: {i:?}"),
    }

    std::fs::remove_file(filler).unwrap();
    let started = Instant::now();
    for i in [&eth, &usdt, &usdc] {
        daemon
            .wait_for(i.id, "paid once space came back", |r| {
                r.status == Status::Paid
            })
            .await;
    }
    daemon.wait_cursor(tip).await;
    eprintln!("caught up {:?} after space came back", started.elapsed());
    assert_eq!(daemon.count("SELECT COUNT(*) FROM transfers").await, 3);
    assert_eq!(daemon.count("SELECT COUNT(*) FROM settlements").await, 3);
    assert_eq!(
        daemon
            .count("SELECT COUNT(*) FROM intents WHERE reference = 'no-room'")
            .await,
        0
    );
    assert_eq!(store.balance_cents("acct-1").await.unwrap(), 30_000);
    assert_money_rules(&store).await;
    let mut daemon = daemon;
    daemon.stop().await;
    daemon.ctx.store.close().await;
    store.close().await;
}
