//! Real mainnet data: the receipts of block 21925176 (helios test data)
//! through `extract`, the watcher's own scan.

use std::collections::BTreeSet;

use paywatch_core::{Asset, AssetId};
use paywatch_evm::{extract, ExtractError};

const RECEIPTS: &str = "tests/fixtures/helios_block_21925176_receipts.json";
const ONE_RECEIPT: &str = "tests/fixtures/helios_block_21925176_receipt_0x6cf75d5d.json";
const EXPECTED: &str = "tests/fixtures/block_21925176_stablecoin_transfers.tsv";
const FAILED_TXS: [&str; 3] = [
    "0xa8f2071ed22d3e8e7721f681cc36c2515adca9568388221d4c0ed3f7efd210b9",
    "0xac8f6d467b040e14eefdb98b6c728da605b8a6691d89426333def58257726cb7",
    "0x5f3ee8cdbd8a1819bcc08287015367afd92a4322eac2fb5f625c5b43913486f0",
];

type Row = (String, u32, String, String, u128);

const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";

/// A token payment's key: its log's position among its own transaction's
/// Transfer logs (the fixture lists block-wide log indexes), read from the
/// receipt itself.
fn position_in_tx(tx: &str, log_index: u64) -> u32 {
    let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(RECEIPTS).unwrap()).unwrap();
    let receipt = raw
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["transactionHash"] == tx)
        .unwrap_or_else(|| panic!("no receipt for {tx}"));
    let mut indexes: Vec<u64> = receipt["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["topics"][0] == TRANSFER)
        .map(|l| {
            u64::from_str_radix(l["logIndex"].as_str().unwrap().trim_start_matches("0x"), 16)
                .unwrap()
        })
        .collect();
    indexes.sort_unstable();
    indexes.iter().position(|i| *i == log_index).unwrap() as u32
}

fn expected() -> Vec<Row> {
    std::fs::read_to_string(EXPECTED)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].to_owned(),
                position_in_tx(f[0], f[1].parse().unwrap()),
                f[2].to_owned(),
                f[3].to_owned(),
                f[4].parse().unwrap(),
            )
        })
        .collect()
}

fn file(path: &str) -> (String, Vec<u8>) {
    (path.to_owned(), std::fs::read(path).unwrap())
}

fn rows(report: &paywatch_evm::ExtractReport) -> Vec<Row> {
    report
        .payments
        .iter()
        .map(|p| {
            let t = &p.transfer;
            let asset = match &t.asset {
                AssetId::Known(a) => a.as_str().to_owned(),
                AssetId::Token { contract } => contract.clone(),
            };
            (t.txid.clone(), t.index, asset, t.to.clone(), t.amount.0)
        })
        .collect()
}

#[test]
fn every_usdt_and_usdc_transfer_to_a_watched_recipient_comes_out_with_its_amount() {
    let expected = expected();
    assert_eq!(expected.len(), 66);
    assert_eq!(expected.iter().filter(|r| r.2 == "USDT").count(), 48);
    assert_eq!(expected.iter().filter(|r| r.2 == "USDC").count(), 18);
    let recipients: BTreeSet<String> = expected.iter().map(|r| r.3.clone()).collect();
    let watch: Vec<String> = recipients.into_iter().collect();

    let report = extract(&[file(RECEIPTS)], &watch).unwrap();
    let got: BTreeSet<Row> = rows(&report)
        .into_iter()
        .filter(|r| r.2 == "USDT" || r.2 == "USDC")
        .collect();
    assert_eq!(got, expected.into_iter().collect::<BTreeSet<_>>());
    assert!(report
        .payments
        .iter()
        .all(|p| p.block == "0x92dabfa3f61ff1c349d12f5fd0dd4c99760a0a41b77dee8f0a80f83efdcb307a"));
    assert_eq!(
        report.without_transactions,
        vec!["0x92dabfa3f61ff1c349d12f5fd0dd4c99760a0a41b77dee8f0a80f83efdcb307a"]
    );
}

#[test]
fn the_direct_transfers_named_in_the_fixture_notes_are_exact() {
    let watch = [
        "0x1ca5aa5b1dd8d948bb0971a5fb1762fe172e0040",
        // Checksummed input is accepted and compared in the stored spelling.
        "0x0236CF642F114645443016AD2DDFD0ABB6071C0B",
        "0xceaf4f788f0a9da83d471d0ab0205da41b8aaaa7",
    ]
    .map(String::from);
    let report = extract(&[file(RECEIPTS)], &watch).unwrap();
    let got = rows(&report);
    for want in [
        (
            "0x90d430828530815869be32fb09251338fc60e13c07f51d1483c35e70ab329751",
            168,
            "USDT",
            "0x1ca5aa5b1dd8d948bb0971a5fb1762fe172e0040",
            3_515_542_664,
        ),
        (
            "0xcb5fcd03b1bc04ebf327399d9c8b2e3f92edaaa371edc8d63c65ce262567b99d",
            208,
            "USDC",
            "0x0236cf642f114645443016ad2ddfd0abb6071c0b",
            2_071_066_600,
        ),
        (
            "0xb577222d0a95bbe16bf70d944a89089897188438beaae572297a0dd488a355e4",
            209,
            "USDC",
            "0xceaf4f788f0a9da83d471d0ab0205da41b8aaaa7",
            2_997_000_000,
        ),
    ] {
        let want = (
            want.0.to_owned(),
            position_in_tx(want.0, want.1),
            want.2.to_owned(),
            want.3.to_owned(),
            want.4,
        );
        assert!(got.contains(&want), "missing {want:?} in {got:?}");
    }
    let sender = report
        .payments
        .iter()
        .find(|p| {
            p.transfer.txid == "0x90d430828530815869be32fb09251338fc60e13c07f51d1483c35e70ab329751"
                && p.transfer.index
                    == position_in_tx(
                        "0x90d430828530815869be32fb09251338fc60e13c07f51d1483c35e70ab329751",
                        168,
                    )
        })
        .and_then(|p| p.transfer.from.clone());
    assert_eq!(
        sender.as_deref(),
        Some("0x32bf453e21567b93757d512a7647613d052127ba")
    );
}

#[test]
fn the_three_failed_transactions_pay_nobody() {
    let raw: serde_json::Value = serde_json::from_slice(&std::fs::read(RECEIPTS).unwrap()).unwrap();
    let mut watch: BTreeSet<String> = expected().into_iter().map(|r| r.3).collect();
    for r in raw.as_array().unwrap() {
        if FAILED_TXS.contains(&r["transactionHash"].as_str().unwrap()) {
            assert_eq!(r["status"], "0x0");
            watch.insert(r["from"].as_str().unwrap().to_owned());
            watch.insert(r["to"].as_str().unwrap().to_owned());
        }
    }
    let watch: Vec<String> = watch.into_iter().collect();
    let report = extract(&[file(RECEIPTS)], &watch).unwrap();
    assert!(report
        .payments
        .iter()
        .chain(&report.failed)
        .all(|p| !FAILED_TXS.contains(&p.transfer.txid.as_str())));
}

#[test]
fn another_erc20_to_a_watched_address_comes_out_as_that_token() {
    // WETH (log 1 of the block's first receipt) is no payment method here.
    let watch = ["0x999b8fc9161fb1f399a0a2d280ae6a75c697f432".to_owned()];
    let report = extract(&[file(RECEIPTS)], &watch).unwrap();
    let weth = report
        .payments
        .iter()
        .find(|p| {
            p.transfer.txid == "0xed435bf6c31aa136a6ca6031850cbdde28566919c2d4bd18e6ac841339f8f234"
                && p.transfer.index
                    == position_in_tx(
                        "0xed435bf6c31aa136a6ca6031850cbdde28566919c2d4bd18e6ac841339f8f234",
                        1,
                    )
        })
        .expect("the WETH transfer");
    assert_eq!(
        weth.transfer.asset,
        AssetId::Token {
            contract: "0xc02aaa39b223fe8d0a0e5c4f27ead9083c756cc2".into()
        }
    );
    assert_eq!(weth.transfer.amount.0, 0x74ee4caaccc12b);
    assert!(report
        .payments
        .iter()
        .all(|p| p.transfer.asset != AssetId::Known(Asset::Eth)));
}

#[test]
fn a_receipt_without_transfers_holds_no_payment() {
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ONE_RECEIPT).unwrap()).unwrap();
    let watch = [
        raw["from"].as_str().unwrap().to_owned(),
        raw["to"].as_str().unwrap().to_owned(),
    ];
    let report = extract(&[file(ONE_RECEIPT)], &watch).unwrap();
    assert!(report.payments.is_empty(), "{:?}", report.payments);
}

#[test]
fn a_log_claiming_another_block_spoils_the_whole_answer() {
    let text = std::fs::read_to_string(RECEIPTS).unwrap();
    let mut raw: serde_json::Value = serde_json::from_str(&text).unwrap();
    let receipt = raw
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| {
            r["transactionHash"]
                == "0x90d430828530815869be32fb09251338fc60e13c07f51d1483c35e70ab329751"
        })
        .unwrap();
    receipt["logs"][0]["blockHash"] =
        "0x1111111111111111111111111111111111111111111111111111111111111111".into();
    let watch = ["0x1ca5aa5b1dd8d948bb0971a5fb1762fe172e0040".to_owned()];
    let err = extract(
        &[("tampered.json".into(), serde_json::to_vec(&raw).unwrap())],
        &watch,
    )
    .unwrap_err();
    assert!(
        matches!(err, ExtractError::Block { .. }) && err.to_string().contains("belongs to block"),
        "{err}"
    );
}

#[test]
fn bad_input_is_refused_with_the_reason() {
    let watch = ["0x1ca5aa5b1dd8d948bb0971a5fb1762fe172e0040".to_owned()];
    let err = extract(&[("x.json".into(), b"not json".to_vec())], &watch).unwrap_err();
    assert!(err.to_string().starts_with("x.json: not JSON"), "{err}");
    let err = extract(&[file(RECEIPTS)], &[]).unwrap_err();
    assert!(matches!(err, ExtractError::NothingWatched));
    // A mixed-case address whose checksum is wrong is a typo, not an address.
    let err = extract(
        &[file(RECEIPTS)],
        &["0x1Ca5aa5b1dd8d948bb0971a5fb1762fe172e0040".to_owned()],
    )
    .unwrap_err();
    let cause = std::error::Error::source(&err)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(err.to_string().contains("--watch"), "{err}");
    assert!(cause.contains("checksum"), "{cause}");
    let block_only = br#"{"number":"0x1","hash":"0x92dabfa3f61ff1c349d12f5fd0dd4c99760a0a41b77dee8f0a80f83efdcb307b","parentHash":"0x2af1ab84a4e79f58be9b35b77968f792a842866f0f94fed37521ecca17c7f442","timestamp":"0x1","transactions":[]}"#;
    let err = extract(&[("block.json".into(), block_only.to_vec())], &watch).unwrap_err();
    assert!(err.to_string().contains("no receipts given"), "{err}");
}
