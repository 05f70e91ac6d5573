//! The `paywatch` command: settings → telemetry → app. The only place that
//! uses anyhow.

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use paywatch::app::{self, Context};
use paywatch::intents::{parse_pool, NewIntent};
use paywatch::settings::Settings;
use paywatch::store::IntentRecord;
use paywatch::IntentKind;
use paywatch_core::{AssetId, Network};
use tracing_subscriber::EnvFilter;

/// The shortest token `hash-token` accepts: a person's own choice must at
/// least be long; `new-token` makes 256 random bits.
const MIN_TOKEN_CHARS: usize = 32;

#[derive(Parser, Debug)]
#[command(
    name = "paywatch",
    version,
    about = "Multi-chain payment watcher and reconciliation daemon"
)]
struct Cli {
    /// Config file layered over the built-in defaults (then PAYWATCH__… variables).
    #[arg(long, global = true, env = "PAYWATCH_CONFIG")]
    config: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Watch every enabled network and reconcile until stopped.
    Run,
    /// Apply database migrations and exit.
    Migrate,
    /// Payment intents.
    #[command(subcommand)]
    Intent(IntentCommand),
    /// Address pools.
    #[command(subcommand)]
    Addresses(AddressCommand),
    /// Recorded transfers.
    #[command(subcommand)]
    Transfers(TransferCommand),
    /// Accounts' USD balances: read one, pay from one.
    #[command(subcommand)]
    Balance(BalanceCommand),
    /// Each watcher's tip, cursor, lag and last error, and the gaps
    /// accepted in its history.
    Status,
    /// A watcher's history.
    #[command(subcommand)]
    Chain(ChainCommand),
    /// Check the money rules against the database: no top-up credited twice
    /// or unsettled, none settled uncredited, no reversal without its
    /// credit, and the ledger's sum. Exits non-zero naming each violation.
    Check,
    /// The configuration itself.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// A consistent copy of a SQLite database in a new file, taken while
    /// paywatch runs (SQLite's VACUUM INTO), whatever its schema: take one
    /// before an upgrade. On PostgreSQL, refused: back up with the server's
    /// own tools (README, "Backups and restores").
    Backup {
        /// The file to write; refused if it exists.
        #[arg(long)]
        to: std::path::PathBuf,
    },
    /// After restoring the database from a copy older than its last write,
    /// before starting any instance: marks every address the lost window
    /// could have issued as issued (watched, never issued again), moves every
    /// id a third party keeps and the feed's cursor past the window, and
    /// tells the storefront on the feed (README, "Backups and restores").
    RestoreCheck {
        /// When the copy was taken (RFC 3339, or unix milliseconds); by
        /// default the newest moment the database holds a trace of.
        #[arg(long)]
        lost_since: Option<String>,
        /// Addresses to mark per network instead of the estimate (twice
        /// the busiest hour's issuing for every hour of the window).
        #[arg(long)]
        addresses: Option<i64>,
    },
    /// Settlements for accounting, as CSV or JSON lines on stdout.
    #[command(subcommand)]
    Export(ExportCommand),
    /// Account keys of the networks that derive their addresses.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print the SHA-256 (hex) of a bearer token read from stdin, for
    /// api.tokens.<role>: the configuration holds hashes, never tokens. A
    /// token shorter than 32 characters is refused: use new-token.
    HashToken,
    /// Make a new random 256-bit bearer token for ROLE (storefront,
    /// operator or support), named NAME in the audit log; print it once,
    /// with the configuration line that holds its hash.
    NewToken { role: String, name: String },
    /// Print the payments recorded chain data holds for some addresses,
    /// through the watcher's own parser: txid, output or log index, (asset,)
    /// address, amount in base units and in coin.
    Extract {
        /// bitcoin, litecoin or ethereum.
        #[arg(long)]
        network: String,
        /// A raw block file (bitcoin, litecoin), or a recorded JSON-RPC
        /// answer (ethereum: eth_getBlockReceipts, eth_getTransactionReceipt,
        /// eth_getBlockByNumber(n, true)); repeat for several, read together.
        #[arg(long = "file", required = true)]
        files: Vec<String>,
        /// An address to look for (any standard type); repeat for several.
        #[arg(long = "watch", required = true)]
        watch: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Print the effective configuration (defaults, the file, PAYWATCH__…
    /// variables), secrets redacted, and every problem in it; non-zero on
    /// any. Needs no database.
    Check,
    /// Put this configuration's money settings (confirmations, finality,
    /// tolerances, deadlines, contracts) in force for every enabled network:
    /// instances configured otherwise stop taking watcher leases and refuse
    /// to start; stricter finality lowers the final height at once. Prints
    /// what changed (README, Configuration agreement).
    Apply {
        /// Who applies it, for the record.
        #[arg(long, default_value = "paywatch config apply")]
        actor: String,
    },
}

#[derive(Subcommand, Debug)]
enum IntentCommand {
    /// Create an intent: a fresh address and an exact amount.
    Create {
        #[arg(long)]
        kind: String,
        #[arg(long)]
        reference: String,
        #[arg(long)]
        account: String,
        #[arg(long)]
        asset: String,
        #[arg(long)]
        network: String,
        /// USD amount, at most two decimals.
        #[arg(long)]
        usd: String,
    },
    /// Show an intent by id, or every intent of a reference.
    Show {
        id: Option<i64>,
        #[arg(long, requires = "kind")]
        reference: Option<String>,
        #[arg(long)]
        kind: Option<String>,
    },
    /// Record a customer's "I have paid" (never taken as proof).
    DeclarePaid {
        id: i64,
        #[arg(long)]
        note: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ChainCommand {
    /// Let a watcher that halted because its node no longer has some blocks
    /// (past a Solana node's retention) go on from RESUME_AT, skipping the
    /// heights between. Payments in them are never seen: the gap is
    /// recorded with who accepted it and why, and `status` shows it. Only a
    /// halted watcher; paywatch resumes there once restarted.
    AcceptGap {
        #[arg(long)]
        network: String,
        /// The first height to read again: the node's first available
        /// block, as the halt message names it.
        #[arg(long)]
        resume_at: u64,
        /// Who accepts it.
        #[arg(long)]
        by: String,
        /// Why, in a sentence.
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand, Debug)]
enum BalanceCommand {
    /// An account's available balance: posted ledger entries only.
    Show {
        #[arg(long)]
        account: String,
    },
    /// Debit an account once per --key; with --order, the debit pays that
    /// order (refused if the order is already paid or the balance falls short).
    Debit {
        #[arg(long)]
        account: String,
        /// USD amount, at most two decimals.
        #[arg(long)]
        usd: String,
        /// Idempotency key: the same key never debits twice.
        #[arg(long)]
        key: String,
        /// The reference of the order this debit pays.
        #[arg(long)]
        order: Option<String>,
        #[arg(long)]
        memo: Option<String>,
    },
    /// Credit money back to an account once per --key, against the debit
    /// (its --key) whose order was cancelled or refunded in part; never
    /// more than that debit took.
    CreditBack {
        #[arg(long)]
        account: String,
        /// USD amount, at most two decimals.
        #[arg(long)]
        usd: String,
        /// Idempotency key: the same key never credits twice.
        #[arg(long)]
        key: String,
        /// The key of the debit whose money comes back.
        #[arg(long)]
        debit: String,
        #[arg(long)]
        memo: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum AddressCommand {
    /// Import a pool file: one address a line, '#' comments.
    Import {
        #[arg(long)]
        network: String,
        #[arg(long)]
        file: String,
    },
}

#[derive(Subcommand, Debug)]
enum ExportCommand {
    /// Every settlement with FROM <= settled at < TO, oldest first: kind,
    /// reference, account, how it settled, method, amount in base units and
    /// in coin, the locked rate and its source, USD, the transactions with
    /// their heights, support's decision and actor, the balance debit,
    /// reversal (README, Accounting export).
    Settlements {
        /// Unix milliseconds, or a UTC time such as 2026-12-01T00:00:00Z.
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        /// csv or jsonl.
        #[arg(long, default_value = "csv")]
        format: String,
    },
}

#[derive(Subcommand, Debug)]
enum KeysCommand {
    /// Make the configured account_key the key in use on a network, from
    /// derivation index 0; the old key is retired and its addresses stay
    /// watched. Run once, with the new key configured, then restart every
    /// instance with it (README, Keys and rotation).
    Rotate {
        #[arg(long)]
        network: String,
    },
}

#[derive(Subcommand, Debug)]
enum TransferCommand {
    /// List recorded transfers, newest first.
    List {
        #[arg(long)]
        network: Option<String>,
        #[arg(long)]
        address: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Only payments to addresses a restore-check marked as issued in a
        /// lost window: no intent knows them, a person attributes them.
        #[arg(long)]
        lost_window: bool,
        /// Only transfers set aside as moving no intent: tokens that are no
        /// payment method's asset (address poisoning, look-alike tokens),
        /// and dust under a settlement's floor (`reconcile.dust_floor`).
        #[arg(long, conflicts_with = "lost_window")]
        spam: bool,
    },
}

/// Errors go to stderr as one line, `Error: <code>: <message>`, whatever
/// RUST_BACKTRACE says: they are for operators, not for debuggers.
fn main() -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn extract(network: &str, files: &[String], watch: &[String]) -> anyhow::Result<()> {
    let network: Network = network.parse().context("method_unknown")?;
    let mut blocks = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).with_context(|| format!("file_unreadable: {f}"))?;
        blocks.push((f.clone(), bytes));
    }
    if network == Network::Ethereum {
        return extract_ethereum(&blocks, watch);
    }
    if network == Network::Tron {
        return extract_tron(&blocks, watch);
    }
    if network == Network::Solana {
        return extract_solana(&blocks, watch);
    }
    let found = paywatch_utxo::extract(network, &blocks, watch).context("extract_failed")?;
    let decimals = match network {
        Network::Bitcoin | Network::Litecoin => 8,
        _ => 0,
    };
    let unit = paywatch_utxo::native_asset(network).code();
    for p in &found {
        let t = &p.transfer;
        println!(
            "{} {} {} {} {} {}",
            t.txid,
            t.index,
            t.to,
            t.amount,
            t.amount.to_decimal_string(decimals),
            unit
        );
    }
    eprintln!(
        "{} payment(s) to {} watched address(es) in {} block file(s)",
        found.len(),
        watch.len(),
        files.len()
    );
    Ok(())
}

fn extract_solana(files: &[(String, Vec<u8>)], watch: &[String]) -> anyhow::Result<()> {
    let report = paywatch_solana::extract(files, watch).context("extract_failed")?;
    for p in &report.payments {
        let t = &p.transfer;
        match &t.asset {
            AssetId::Known(a) => {
                let decimals = a.decimals();
                println!(
                    "{} {} {} {} {}",
                    t.txid,
                    t.to,
                    t.amount,
                    t.amount.to_decimal_string(decimals),
                    a.as_str()
                );
            }
            // Any other mint is no method's asset: shown by mint, in base units.
            AssetId::Token { contract } => {
                println!("{} {} {} token:{contract}", t.txid, t.to, t.amount);
            }
        }
    }
    for signature in &report.failed_transactions {
        eprintln!("not counted: transaction {signature} failed (it moved only its fee)");
    }
    eprintln!(
        "{} payment(s) to {} watched address(es) in {} file(s)",
        report.payments.len(),
        watch.len(),
        files.len()
    );
    Ok(())
}

fn extract_tron(files: &[(String, Vec<u8>)], watch: &[String]) -> anyhow::Result<()> {
    let report = paywatch_tron::extract(files, watch).context("extract_failed")?;
    let coin = |t: &paywatch_core::Transfer| match &t.asset {
        AssetId::Known(a) => {
            let decimals = a.decimals();
            (a.as_str().to_owned(), t.amount.to_decimal_string(decimals))
        }
        AssetId::Token { contract } => (format!("token:{contract}"), "?".to_owned()),
    };
    for p in &report.payments {
        let t = &p.transfer;
        let (asset, amount) = coin(t);
        println!("{} {asset} {} {} {amount}", t.txid, t.to, t.amount);
    }
    for p in &report.failed {
        let t = &p.transfer;
        eprintln!(
            "not counted: transaction {} failed ({} {} to {})",
            t.txid,
            t.amount,
            t.asset.code(),
            t.to
        );
    }
    for block in &report.without_transactions {
        eprintln!(
            "block {block}: transaction infos only, so TRX transfers are not visible; add the block's transactions"
        );
    }
    eprintln!(
        "{} payment(s) to {} watched address(es) in {} file(s)",
        report.payments.len(),
        watch.len(),
        files.len()
    );
    Ok(())
}

fn extract_ethereum(files: &[(String, Vec<u8>)], watch: &[String]) -> anyhow::Result<()> {
    let report = paywatch_evm::extract(files, watch).context("extract_failed")?;
    for p in &report.payments {
        let t = &p.transfer;
        // A token transfer's key: its log's place among its transaction's
        // Transfer logs (not the block-wide log index, which changes when the
        // transaction is mined again); ETH by value or internal call.
        let index = match t.index.checked_sub(paywatch_evm::NATIVE_INDEX) {
            None => format!("log:{}", t.index),
            Some(0) => "value".to_owned(),
            Some(n) => format!("call:{n}"),
        };
        let (asset, coin) = match &t.asset {
            AssetId::Known(a) => {
                let decimals = a.decimals();
                (a.as_str().to_owned(), t.amount.to_decimal_string(decimals))
            }
            AssetId::Token { contract } => (format!("token:{contract}"), "?".to_owned()),
        };
        println!("{} {index} {asset} {} {} {coin}", t.txid, t.to, t.amount);
    }
    for p in &report.failed {
        eprintln!(
            "not counted: transaction {} failed ({} {} to {})",
            p.transfer.txid,
            p.transfer.amount,
            p.transfer.asset.code(),
            p.transfer.to
        );
    }
    for block in &report.without_transactions {
        eprintln!(
            "block {block}: receipts only, so ETH values are not visible; add its eth_getBlockByNumber(n, true) answer"
        );
    }
    eprintln!(
        "{} payment(s) to {} watched address(es) in {} file(s)",
        report.payments.len(),
        watch.len(),
        files.len()
    );
    Ok(())
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn")),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: journald and log files get plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Command::HashToken = &cli.command {
        let mut token = String::new();
        std::io::stdin()
            .read_line(&mut token)
            .context("reading the token from stdin")?;
        let token = token.trim_end_matches(['\r', '\n']);
        anyhow::ensure!(!token.is_empty(), "no token on stdin");
        anyhow::ensure!(
            token.chars().count() >= MIN_TOKEN_CHARS,
            "the token has {} characters; a token a person made up needs at least {MIN_TOKEN_CHARS} \
             to resist guessing. Make one with: paywatch new-token ROLE NAME",
            token.chars().count()
        );
        println!("{}", paywatch::api::TokenTable::hash_token(token));
        return Ok(());
    }
    if let Command::NewToken { role, name } = &cli.command {
        let made = paywatch::api::TokenTable::new_token(role, name)?;
        println!("token: {}", made.token);
        println!("hash: {}", made.hash);
        println!(
            "# The token is shown once: give it to its {role}, keep it out of logs and tickets."
        );
        println!("# Add its hash, with its name, to the configuration:");
        println!("api.tokens.{role} = [\"{name}:{}\"]", made.hash);
        return Ok(());
    }
    if let Command::Extract {
        network,
        files,
        watch,
    } = &cli.command
    {
        // Needs no database and no settings: it reads files only.
        return extract(network, files, watch);
    }
    if let Command::Config(ConfigCommand::Check) = &cli.command {
        // Needs no database: it reads the configuration only.
        let report = Settings::check(cli.config.as_deref());
        if let Some(effective) = &report.effective {
            println!("{effective}");
        }
        if report.problems.is_empty() {
            println!("# no problems found");
            return Ok(());
        }
        for problem in &report.problems {
            eprintln!("problem: {problem}");
        }
        bail!(
            "{} problem(s) in the configuration; nothing was run",
            report.problems.len()
        );
    }
    let settings = Settings::load(cli.config.as_deref())?;
    if let Command::Backup { to } = &cli.command {
        // Neither migrated nor checked: a backup is what one takes first.
        let store = paywatch::store::Store::connect(&settings.database.url).await?;
        let bytes = store.backup_to(to).await?;
        store.close().await;
        println!("backed up to {} ({bytes} bytes)", to.display());
        return Ok(());
    }
    let reads_only = matches!(
        cli.command,
        Command::Status
            | Command::Check
            | Command::Intent(IntentCommand::Show { .. })
            | Command::Transfers(TransferCommand::List { .. })
            | Command::Balance(BalanceCommand::Show { .. })
            | Command::Export(_)
    );
    // Only `migrate` upgrades a schema in use, so a rolling upgrade decides
    // when; SQLite's one instance upgrades at start, under the run lock that
    // keeps a second process (a live daemon) off the file.
    let sqlite_run_lock = match cli.command {
        Command::Run => paywatch::store::RunLock::acquire(&settings.database.url).await?,
        _ => None,
    };
    let schema = if reads_only {
        app::Schema::Current
    } else if matches!(cli.command, Command::Migrate) || sqlite_run_lock.is_some() {
        app::Schema::Migrate
    } else {
        app::Schema::CreateOrCurrent
    };
    let ctx = Context::build_with(settings, schema).await?;
    // `run` takes it again for as long as it runs.
    drop(sqlite_run_lock);
    match cli.command {
        Command::Run => app::run(ctx).await?,
        Command::Extract { .. }
        | Command::HashToken
        | Command::NewToken { .. }
        | Command::Config(ConfigCommand::Check)
        | Command::Backup { .. } => {} // answered above
        Command::Config(ConfigCommand::Apply { actor }) => {
            let applied = paywatch::money_settings::apply(
                &ctx.store,
                &ctx.settings,
                &actor,
                ctx.clock.now_ms(),
            )
            .await?;
            for a in applied {
                if a.differences.is_empty() {
                    println!("{}: in force, unchanged", a.network);
                    continue;
                }
                println!(
                    "{}: in force now: {}; the watcher lease was fenced: restart the instances with this configuration",
                    a.network,
                    a.differences.join("; ")
                );
                if let Some(blocks) = a.final_height_lowered_by {
                    println!(
                        "{}: stricter finality: the final height fell by {blocks} blocks; money not yet settled waits for the new depth, settled money stays settled",
                        a.network
                    );
                }
            }
        }
        Command::Export(ExportCommand::Settlements { from, to, format }) => {
            let format = match format.as_str() {
                "csv" => paywatch::export::Format::Csv,
                "jsonl" => paywatch::export::Format::JsonLines,
                other => bail!("--format {other:?}: csv or jsonl"),
            };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            paywatch::export::write_settlements(
                &ctx.store,
                parse_instant("--from", &from)?,
                parse_instant("--to", &to)?,
                format,
                &mut out,
            )
            .await?;
        }
        Command::Keys(KeysCommand::Rotate { network }) => {
            let network: Network = network.parse()?;
            let rotation = paywatch::keys::rotate(
                &ctx.store,
                network,
                ctx.intents.derivers().get(&network),
                ctx.clock.now_ms(),
            )
            .await?;
            println!(
                "{}: key {} is in use from index 0; key {} retired at index {} (its addresses stay watched); restart every instance with the new key",
                rotation.network, rotation.fingerprint, rotation.retired, rotation.retired_next_index
            );
        }
        Command::RestoreCheck {
            lost_since,
            addresses,
        } => {
            paywatch::keys::check_keys(&ctx.store, ctx.intents.derivers()).await?;
            // On SQLite, no daemon may hold the file meanwhile.
            let lock = paywatch::store::RunLock::acquire(&ctx.settings.database.url).await?;
            let plan = paywatch::restore::RestorePlan {
                lost_since_ms: lost_since
                    .as_deref()
                    .map(|t| parse_instant("--lost-since", t))
                    .transpose()?,
                addresses_per_network: addresses,
                now_ms: ctx.clock.now_ms(),
                holds_run_lock: lock.is_some(),
            };
            let report =
                paywatch::restore::restore_check(&ctx.store, ctx.intents.derivers(), plan).await?;
            for line in report.lines() {
                println!("{line}");
            }
        }
        Command::Migrate => println!("migrations applied ({})", ctx.store.dialect().as_str()),
        Command::Intent(c) => intent(&ctx, c).await?,
        Command::Balance(c) => balance(&ctx, c).await?,
        Command::Chain(ChainCommand::AcceptGap {
            network,
            resume_at,
            by,
            reason,
        }) => {
            let network: Network = network.parse()?;
            let gap = ctx
                .store
                .accept_gap(network, resume_at, &by, &reason, ctx.clock.now_ms())
                .await?
                .context("gap_refused")?;
            println!(
                "{network}: heights {}..={} skipped (gap {}, accepted by {}); restart paywatch \
                 to resume at {resume_at}",
                gap.from_height, gap.to_height, gap.id, gap.accepted_by
            );
        }
        Command::Addresses(AddressCommand::Import { network, file }) => {
            let network: Network = network.parse()?;
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?;
            let addresses = match parse_pool(&file, &text, network) {
                Ok(a) => a,
                Err(errors) => {
                    for e in &errors {
                        eprintln!("{e}");
                    }
                    bail!("{} bad line(s) in {file}; nothing imported", errors.len());
                }
            };
            let report = ctx
                .store
                .import_addresses(network, &addresses, ctx.clock.now_ms())
                .await?;
            let free = ctx.store.free_addresses(network).await?;
            println!(
                "{network}: {} added, {} already present, {free} free",
                report.added, report.already_present
            );
        }
        Command::Transfers(TransferCommand::List {
            lost_window: true,
            limit,
            ..
        }) => {
            for t in ctx.store.lost_window_transfers(limit).await? {
                println!(
                    "{} {} {} -> {} {} {} height {} (address marked at {} ms)",
                    t.transfer_id,
                    t.network,
                    t.txid,
                    t.to_address,
                    t.amount,
                    t.asset,
                    t.block_height,
                    t.marked_at_ms
                );
            }
        }
        Command::Transfers(TransferCommand::List {
            spam: true, limit, ..
        }) => {
            for s in ctx.store.spam_transfers(limit).await? {
                let t = &s.transfer;
                println!(
                    "{} {} {} {}:{} -> {} {} {} height {} {}",
                    t.id,
                    s.reason(),
                    t.network,
                    t.txid,
                    t.index,
                    t.to,
                    t.amount,
                    t.asset.code(),
                    t.block_height,
                    s.intent_id
                        .map_or_else(|| "no intent".to_owned(), |id| format!("intent {id}"))
                );
            }
        }
        Command::Transfers(TransferCommand::List {
            network,
            address,
            limit,
            ..
        }) => {
            let network = network.map(|n| n.parse::<Network>()).transpose()?;
            for t in ctx
                .store
                .transfers(network, address.as_deref(), limit)
                .await?
            {
                println!(
                    "{} {} {}:{} -> {} {} {} height {} {}",
                    t.id,
                    t.network,
                    t.txid,
                    t.index,
                    t.to,
                    t.amount,
                    t.asset.code(),
                    t.block_height,
                    if t.orphaned_at_ms.is_some() {
                        "orphaned"
                    } else if t.success {
                        "ok"
                    } else {
                        "failed"
                    }
                );
            }
        }
        Command::Check => {
            let check = ctx.store.check_invariants().await?;
            for v in &check.violations {
                println!("VIOLATION {}: {}", v.rule, v.detail);
            }
            anyhow::ensure!(
                check.violations.is_empty(),
                "invariant_violated: {} violation(s) of the money rules (above)",
                check.violations.len()
            );
            println!(
                "ok: ledger top-ups {} cents = settled top-ups {} cents; no double, missing or \
                 orphan credit",
                check.ledger_topup_cents, check.settled_topup_cents
            );
        }
        Command::Status => {
            let leases = ctx.store.lease_holders().await?;
            for network in Network::ALL {
                if let Some(s) = ctx.store.chain_status(network).await? {
                    // Which instance watches: an operator with several
                    // instances looks here first.
                    let watched_by = match leases.iter().find(|l| l.network == network) {
                        Some(l) if !l.expired => {
                            format!("watched by {} (lease {})", l.holder, l.token)
                        }
                        Some(l) => format!("no watcher: the lease of {} ran out", l.holder),
                        None => "no watcher has held its lease".to_owned(),
                    };
                    let lag = match (s.tip_height, s.cursor_height) {
                        (Some(t), Some(c)) => t.saturating_sub(c).to_string(),
                        _ => "-".into(),
                    };
                    println!(
                        "{network}: {} tip {:?} cursor {:?} final {:?} lag {lag}; {watched_by} {}",
                        s.watcher_state,
                        s.tip_height,
                        s.cursor_height,
                        s.final_height,
                        s.last_error.unwrap_or_default()
                    );
                }
                let dormant = ctx.store.dormant_count(network).await?;
                if dormant > 0 {
                    println!(
                        "{network}: {dormant} dormant addresses, out of the live watch set and \
                         looked up by the sweep"
                    );
                }
                if let Some(from) = ctx.store.unread_from(network).await? {
                    println!(
                        "{network}: blocks from {from} were handed out without every transfer \
                         in them (untraced); they are read again from there"
                    );
                }
                let open_gaps = ctx.store.open_balance_gap_count(network).await?;
                if open_gaps > 0 {
                    println!(
                        "{network}: {open_gaps} balance gaps open: money at an issued address \
                         no transfer explains (GET /v1/review-queue, balance_gaps)"
                    );
                }
                for g in ctx.store.chain_gaps(network).await? {
                    println!(
                        "{network}: gap {}..={} skipped, never read: accepted by {} at {} ms: {}",
                        g.from_height, g.to_height, g.accepted_by, g.accepted_at_ms, g.reason
                    );
                }
            }
        }
    }
    Ok(())
}

async fn intent(ctx: &Context, command: IntentCommand) -> anyhow::Result<()> {
    match command {
        IntentCommand::Create {
            kind,
            reference,
            account,
            asset,
            network,
            usd,
        } => {
            paywatch::keys::check_keys(&ctx.store, ctx.intents.derivers()).await?;
            let req = NewIntent {
                kind,
                reference,
                account,
                asset,
                network,
                usd_amount: usd,
            };
            match ctx.intents.create(&req).await {
                Ok(i) => print_intent(&i),
                Err(e) => bail!("{}: {e}", e.code()),
            }
        }
        IntentCommand::Show { id: Some(id), .. } => match ctx.store.intent(id).await? {
            Some(i) => {
                print_intent(&i);
                for e in ctx.store.intent_events(id).await? {
                    println!(
                        "  {} {} {} {} {}",
                        e.at_ms,
                        e.kind,
                        e.status.unwrap_or_default(),
                        e.exception.unwrap_or_default(),
                        e.detail.unwrap_or_default()
                    );
                }
            }
            None => bail!("not_found: no intent {id}"),
        },
        IntentCommand::Show {
            id: None,
            reference: Some(reference),
            kind: Some(kind),
        } => {
            let kind: IntentKind = kind.parse()?;
            let found = ctx.store.intents_for_reference(kind, &reference).await?;
            if found.is_empty() {
                bail!("not_found: no intent for {kind} {reference}");
            }
            found.iter().for_each(print_intent);
        }
        IntentCommand::Show { .. } => bail!("give an intent id, or --kind and --reference"),
        IntentCommand::DeclarePaid { id, note } => {
            use paywatch::store::Declared;
            match ctx
                .store
                .declare_paid(id, note.as_deref(), ctx.clock.now_ms())
                .await?
            {
                Declared::NoSuchIntent => bail!("not_found: no intent {id}"),
                Declared::Recorded => println!(
                    "recorded: intent {id} declared paid (a declaration is not proof; the chain decides)"
                ),
                Declared::AlreadyRecorded { .. } => println!(
                    "already recorded: intent {id} was declared paid before; nothing new was written"
                ),
            }
        }
    }
    Ok(())
}

async fn balance(ctx: &Context, command: BalanceCommand) -> anyhow::Result<()> {
    use paywatch::reconcile::{
        BalanceCredit, BalancePayment, CreditOutcome, DebitOutcome, SettledBy,
    };
    let usd = |cents: i64| {
        format!(
            "{}.{:02}",
            cents.unsigned_abs() / 100,
            cents.unsigned_abs() % 100
        )
    };
    match command {
        BalanceCommand::Show { account } => {
            let cents = ctx.store.balance_cents(&account).await?;
            println!(
                "{account}: {}{} USD available",
                if cents < 0 { "-" } else { "" },
                usd(cents)
            );
        }
        BalanceCommand::Debit {
            account,
            usd: amount,
            key,
            order,
            memo,
        } => {
            let cents = usd_cents(&amount)?;
            let outcome = ctx
                .reconciler
                .debit(&BalancePayment {
                    account: &account,
                    cents,
                    key: &key,
                    memo: memo.as_deref(),
                    order: order.as_deref(),
                })
                .await?;
            let paid = order
                .as_deref()
                .map(|o| format!("; order {o} paid from the balance"))
                .unwrap_or_default();
            match outcome {
                DebitOutcome::Posted { balance_cents } => {
                    println!(
                        "debited {} USD from {account}{paid}; {} USD left",
                        usd(cents),
                        usd(balance_cents)
                    )
                }
                DebitOutcome::AlreadyPosted { balance_cents } => println!(
                    "already debited under key {key}{paid}; nothing taken again; {} USD available",
                    usd(balance_cents)
                ),
                DebitOutcome::Insufficient { balance_cents } => bail!(
                    "insufficient_balance: {account} has {} USD, not {} USD; nothing was debited",
                    usd(balance_cents),
                    usd(cents)
                ),
                DebitOutcome::KeyConflict => {
                    bail!("conflict: key {key} was used for another debit; use a new key")
                }
                DebitOutcome::OrderAlreadyPaid(by) => bail!(
                    "conflict: order {} is already paid by {}; nothing was debited",
                    order.unwrap_or_default(),
                    match by {
                        SettledBy::Intent(id) => format!("intent {id}"),
                        SettledBy::Balance => "the balance".to_owned(),
                    }
                ),
                DebitOutcome::OrderOfAnotherAccount(owner) => bail!(
                    "conflict: order {} belongs to account {owner}; nothing was debited",
                    order.unwrap_or_default()
                ),
            }
        }
        BalanceCommand::CreditBack {
            account,
            usd: amount,
            key,
            debit,
            memo,
        } => {
            let cents = usd_cents(&amount)?;
            let outcome = ctx
                .reconciler
                .credit_back(&BalanceCredit {
                    account: &account,
                    cents,
                    key: &key,
                    debit: &debit,
                    memo: memo.as_deref(),
                })
                .await?;
            match outcome {
                CreditOutcome::Posted { balance_cents } => println!(
                    "credited {} USD back to {account} from debit {debit}; {} USD available",
                    usd(cents),
                    usd(balance_cents)
                ),
                CreditOutcome::AlreadyPosted { balance_cents } => println!(
                    "already credited under key {key}; nothing credited again; {} USD available",
                    usd(balance_cents)
                ),
                CreditOutcome::KeyConflict => {
                    bail!("conflict: key {key} was used for another credit; use a new key")
                }
                CreditOutcome::NoSuchDebit => bail!(
                    "not_found: {account} has no debit under key {debit}; nothing was credited"
                ),
                CreditOutcome::BeyondDebit {
                    debited_cents,
                    credited_cents,
                } => bail!(
                    "credit_exceeds_debit: debit {debit} took {} USD and {} USD of it is credited \
                     back already; {} USD more would exceed it; nothing was credited",
                    usd(debited_cents),
                    usd(credited_cents),
                    usd(cents)
                ),
            }
        }
    }
    Ok(())
}

/// `--usd` as cents, above 0.
fn usd_cents(amount: &str) -> anyhow::Result<i64> {
    let cents = paywatch_core::Amount::parse_decimal("usd", amount, 2)
        .map_err(|e| anyhow::anyhow!("amount_invalid: {e}"))?;
    i64::try_from(cents.0)
        .ok()
        .filter(|c| *c > 0)
        .ok_or_else(|| anyhow::anyhow!("amount_invalid: usd must be above 0"))
}

fn print_intent(i: &IntentRecord) {
    let d = i.method.decimals();
    println!(
        "intent {id} {kind} {reference} account {account}\n  pay {coin} {asset} on {network} to {address}\n  \
         due {due} base units ({usd} USD at {rate} USD/{asset}, {source})\n  status {status}{exception}\n  \
         received final {fin} pending {pend}\n  expires_at_ms {exp}",
        id = i.id,
        kind = i.kind,
        reference = i.reference,
        account = i.account,
        coin = i.amount_due.to_decimal_string(d),
        asset = i.method.asset(),
        network = i.method.network(),
        address = i.address,
        due = i.amount_due,
        usd = paywatch_core::Amount(i.usd_cents as u128).to_decimal_string(2),
        rate = i.rate_usd,
        source = i.rate_source,
        status = i.status,
        exception = i.exception.map(|e| format!(" ({e})")).unwrap_or_default(),
        fin = i.amount_final.to_decimal_string(d),
        pend = i.amount_pending.to_decimal_string(d),
        exp = i.expires_at_ms,
    );
    if let Some((network, address)) = paywatch::twin::twin(i.method.network(), &i.address) {
        // Support's first question on a wrong-network payment: the same key's
        // address on the other chain, where such money lands.
        println!("  twin {network} {address}");
    }
    if let Some(token) = &i.view_token {
        println!("  view_token {token}\n  pay_page /pay/{token}");
    }
}

/// Unix milliseconds, or a UTC time as `2026-12-05T01:00:00Z`.
fn parse_instant(flag: &str, text: &str) -> anyhow::Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let bad = || {
        anyhow::anyhow!(
            "{flag} {text:?}: give unix milliseconds or a UTC time such as 2026-12-05T01:00:00Z"
        )
    };
    let t = text.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = t.split_once('T').ok_or_else(bad)?;
    let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let d: Vec<&str> = date.split('-').collect();
    let h: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || h.len() != 3 {
        return Err(bad());
    }
    let (y, m, day) = (num(d[0])?, num(d[1])?, num(d[2])?);
    let (hh, mm, ss) = (num(h[0])?, num(h[1])?, num(h[2])?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return Err(bad());
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Ok(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000)
}
