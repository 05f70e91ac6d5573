//! `paywatch extract`: an operator's "why was this payment not seen?" answered
//! from block files, through the watcher's own parser and filter.

use std::path::{Path, PathBuf};
use std::process::Command;

const PAYWATCH: &str = env!("CARGO_BIN_EXE_paywatch");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("chains/utxo/tests/fixtures")
        .join(name)
}

const BLOCK_702861: &str =
    "mainnet_block_000000000000000000000c835b2adcaedc20fdf6ee440009c249452c726dafae.raw";

fn extract(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(PAYWATCH)
        .arg("extract")
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn extract_prints_each_payment_with_txid_index_address_and_both_amounts() {
    let binary = fixture(BLOCK_702861);
    let hex = fixture("block_13b8a.hex");
    let (code, out, err) = extract(&[
        "--network",
        "bitcoin",
        "--file",
        binary.to_str().unwrap(),
        "--file",
        hex.to_str().unwrap(),
        "--watch",
        "bc1qmexsnhyukr729eclj6mesu0unyf3p0qvn6app6fu5j2xjmavay4qrx02ge",
        "--watch",
        "3JKMCNPXvfewye4Uxk6sJZGxK74tSmL9ty",
        "--watch",
        "1NvAQz3qfdP589ZBCgaWS2WcgmqPxCpqSe",
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.contains(&"7bf717689b9033eafb2f3272719989b304bb7db616c2bfb5ded2e1b76d50a4f0 0 bc1qmexsnhyukr729eclj6mesu0unyf3p0qvn6app6fu5j2xjmavay4qrx02ge 422939 0.00422939 BTC"), "{out}");
    assert!(lines.contains(&"f0860751a42d806208159233572f759ae94905b9f6e0b247c614922bdbbc2710 0 3JKMCNPXvfewye4Uxk6sJZGxK74tSmL9ty 512419 0.00512419 BTC"), "{out}");
    assert!(
        lines.iter().any(|l| l
            .starts_with("db60fb93d736894ed0b86cb92548920a3fe8310dd19b0da7ad97e48725e1e12e ")
            && l.ends_with(" 1NvAQz3qfdP589ZBCgaWS2WcgmqPxCpqSe 1290000000 12.9 BTC")),
        "the hex file is read beside the binary one: {out}"
    );
    assert!(err.contains("in 2 block file(s)"), "{err}");
}

#[test]
fn extract_reads_litecoin_mweb_blocks_including_the_hogex_output() {
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("electrumx_litecoin_mainnet_2265985.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("2265985.hex");
    std::fs::write(&file, json["block"].as_str().unwrap()).unwrap();
    let (code, out, err) = extract(&[
        "--network",
        "litecoin",
        "--file",
        file.to_str().unwrap(),
        "--watch",
        "ltc1gxr529607w908ccru6uguk6pay5ugmvk5mdh6jj4w5dw3jj6e2dcqkulphy",
        "--watch",
        "LTC1QCKUS8NVGHXWM8645YLRYFUVRM60NRAGLTSSA8A",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("b0a867c72f417dc0a904f708ba37fa2d94c3b25a288ea6e8fbe8cd14d8ca7119 0 ltc1gxr529607w908ccru6uguk6pay5ugmvk5mdh6jj4w5dw3jj6e2dcqkulphy 9191015763 91.91015763 LTC"), "the HogEx output: {out}");
    assert!(out.contains("1494ae566aa3d3498a5cbb90b8f305a46467f616cb2bb62e3713c6ce3d80bbb5 1 ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a 5310902 0.05310902 LTC"), "{out}");
}

#[test]
fn extract_refuses_bad_input_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.raw");
    let bytes = std::fs::read(fixture(BLOCK_702861)).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (code, _, err) = extract(&[
        "--network",
        "bitcoin",
        "--file",
        cut.to_str().unwrap(),
        "--watch",
        "3JKMCNPXvfewye4Uxk6sJZGxK74tSmL9ty",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("cut.raw") && (err.contains("ends early") || err.contains("cut short")),
        "{err}"
    );

    let json = fixture("electrumx_litecoin_mainnet_2265985.json");
    let (code, _, err) = extract(&[
        "--network",
        "litecoin",
        "--file",
        json.to_str().unwrap(),
        "--watch",
        "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("this is JSON"), "{err}");

    let (code, _, err) = extract(&[
        "--network",
        "bitcoin",
        "--file",
        fixture(BLOCK_702861).to_str().unwrap(),
        "--watch",
        "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a",
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("is not a bitcoin address: it is a litecoin address"),
        "{err}"
    );
}

fn chain_fixture(chain: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("chains")
        .join(chain)
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn extract_reads_ethereum_receipts_and_prints_log_index_asset_and_amounts() {
    let receipts = chain_fixture("evm", "helios_block_21925176_receipts.json");
    let (code, out, err) = extract(&[
        "--network",
        "ethereum",
        "--file",
        receipts.to_str().unwrap(),
        "--watch",
        "0x627846f6131a4631ddf6bb53bd682ccf51f623b3",
        "--watch",
        "0x1F2F10D1C40777AE1DA742455C65828FF36DF387",
    ]);
    assert_eq!(code, 0, "{err}");
    let stablecoins: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" USDT ") || l.contains(" USDC "))
        .collect();
    assert_eq!(
        stablecoins,
        [
            // Block-wide log indexes 85 and 98: the key is the log's place
            // among its transaction's Transfer logs, 0th and 6th.
            "0x81728f20df72fba5ec109dc1f4e6bf10745733dce1848e653a9b1b9964f18e9f log:0 USDT 0x627846f6131a4631ddf6bb53bd682ccf51f623b3 289053964 289.053964",
            "0x81728f20df72fba5ec109dc1f4e6bf10745733dce1848e653a9b1b9964f18e9f log:6 USDC 0x1f2f10d1c40777ae1da742455c65828ff36df387 2549977996 2549.977996",
        ],
        "{out}"
    );
    // Other tokens to a watched address show by contract (here WETH).
    assert!(
        out.lines().any(|l| l.contains(" log:3 token:0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2 0x1f2f10d1c40777ae1da742455c65828ff36df387 122127150248624128 ?")),
        "{out}"
    );
    assert!(
        err.contains("receipts only, so ETH values are not visible"),
        "{err}"
    );

    // A mistyped checksum is refused, and no spelling is offered to copy.
    let (code, _, err) = extract(&[
        "--network",
        "ethereum",
        "--file",
        receipts.to_str().unwrap(),
        "--watch",
        "0x627846F6131a4631ddf6bb53bd682ccf51f623b3",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("bad EIP-55 checksum"), "{err}");
    assert!(!err.contains("0x627846F6131A4631"), "{err}");
}

#[test]
fn extract_reads_tron_transactions_with_their_infos() {
    let files = [
        "gemwallet_transaction_coin_transfer.json",
        "gemwallet_transaction_coin_transfer_receipt.json",
        "ledgerlive_trongrid_tx_usdt_0130dfde.json",
        "ledgerlive_gettransactioninfobyid_usdt_0130dfde.json",
    ]
    .map(|f| chain_fixture("tron", f));
    let mut args = vec!["--network", "tron"];
    for f in &files {
        args.extend(["--file", f.to_str().unwrap()]);
    }
    // The recipients of the fixtures' 25 TRX and 41.677389 USDT.
    args.extend([
        "--watch",
        "TFanVGmnjKqFRd8dVQAccZE2t42Vu4rv51",
        "--watch",
        "TXVj38D1XR3TPgSHTCZGC8wkLDAGqF1oqx",
    ]);
    let (code, out, err) = extract(&args);
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "0130dfde9281a48378109039ef512229d5359fbee2a8adbb17ad73aebc67ea99 USDT TXVj38D1XR3TPgSHTCZGC8wkLDAGqF1oqx 41677389 41.677389",
            "5a9935a1b7be0150a511111582bbfed62ddb873333b3986bd712e6105fe90ad5 TRX TFanVGmnjKqFRd8dVQAccZE2t42Vu4rv51 25000000 25",
        ],
        "{out}"
    );

    let (code, _, err) = extract(&[
        "--network",
        "tron",
        "--file",
        files[0].to_str().unwrap(),
        "--watch",
        "TFanVGmnjKqFRd8dVQAccZE2t42Vu4rv5X",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("checksum"), "{err}");
}

#[test]
fn extract_reads_solana_answers_and_shows_tokens_apart_from_sol() {
    let sol = chain_fixture("solana", "gemwallet_transfer_sol_with_compute.json");
    let usdc = chain_fixture("solana", "gemwallet_usdc_transfer.json");
    let (code, out, err) = extract(&[
        "--network",
        "solana",
        "--file",
        sol.to_str().unwrap(),
        "--file",
        usdc.to_str().unwrap(),
        "--watch",
        "7nVDzZUjrBA3gHs3gNcHidhmR96CH7KpKsU8pyBZGHUr",
        "--watch",
        "3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK",
    ]);
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines.contains(&"2QeBm7G7qLmVTCVKAkbSUuZvcFjg6mBRVqaVSKWSZsTqJxHVTzMUwxDtu1Myfu8RzpUv5YMEBFFpGbwVM9ZQY8DL 7nVDzZUjrBA3gHs3gNcHidhmR96CH7KpKsU8pyBZGHUr 69000000 0.069 SOL"),
        "{out}"
    );
    // The USDC owner is paid in USDC (Circle's mint, recognised), never in SOL.
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(" 3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK 100000 0.1 USDC")),
        "{out}"
    );
    assert!(
        !out.contains("3UJQqKq8Xyx4aVRmHgEwpQZiW7toYRQCTy6Bgp1RdKnK 0"),
        "{out}"
    );

    let (code, _, err) = extract(&[
        "--network",
        "solana",
        "--file",
        sol.to_str().unwrap(),
        "--watch",
        "7nVDzZUjrBA3gHs3gNcHidhmR96CH7KpKsU8pyBZGHUl",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--watch"), "{err}");
}
