//! Real mainnet blocks (tests/fixtures, see SOURCES.md there) parse whole,
//! verify against their headers, and give exactly the listed payments.

use std::sync::Arc;

use paywatch_core::{Amount, Network, Transfer, WatchSet};
use paywatch_utxo::{from_hex, scan_block, watch_key, Chain, Params, RawBlock};

const BLOCK_702861: &[u8] = include_bytes!(
    "fixtures/mainnet_block_000000000000000000000c835b2adcaedc20fdf6ee440009c249452c726dafae.raw"
);
const BLOCK_100002_HEX: &str = include_str!("fixtures/block_13b8a.hex");
const LTC_2265985_JSON: &str = include_str!("fixtures/electrumx_litecoin_mainnet_2265985.json");

fn watching(network: Network, addresses: &[&str]) -> Arc<WatchSet> {
    let set = WatchSet::new(network).keyed(watch_key(network));
    set.extend(addresses.iter().copied());
    Arc::new(set)
}

fn found(network: Network, bytes: &[u8], addresses: &[&str]) -> Vec<(String, u32, String, u128)> {
    let block = RawBlock::parse(bytes).expect("parses");
    block.verify(None).expect("merkle root matches");
    let params = Params::new(network, Chain::Main).unwrap();
    let watch = watching(network, addresses);
    let mut got: Vec<_> = scan_block(&block, &params, &watch.read())
        .into_iter()
        .map(|t: Transfer| (t.txid, t.index, t.to, t.amount.0))
        .collect();
    got.sort();
    got
}

fn row(txid: &str, index: u32, to: &str, amount: u128) -> (String, u32, String, u128) {
    (txid.to_owned(), index, to.to_owned(), amount)
}

#[test]
fn bitcoin_702861_gives_the_listed_segwit_p2sh_and_p2pkh_payments() {
    let block = RawBlock::parse(BLOCK_702861).unwrap();
    assert_eq!(
        block.hash().to_string(),
        "000000000000000000000c835b2adcaedc20fdf6ee440009c249452c726dafae"
    );
    assert_eq!(block.tx_count(), 2500);
    assert_eq!(block.mweb_len(), 0);
    // The in-place reader agrees with rust-bitcoin's full decoder on every
    // transaction and every output.
    let full: bitcoin::Block = bitcoin::consensus::deserialize(BLOCK_702861).unwrap();
    for (i, tx) in full.txdata.iter().enumerate() {
        assert_eq!(block.txid(i), tx.compute_txid());
        let ours: Vec<(u64, &[u8])> = block
            .outputs(i)
            .map(|o| (o.value, o.script.as_bytes()))
            .collect();
        let theirs: Vec<(u64, &[u8])> = tx
            .output
            .iter()
            .map(|o| (o.value.to_sat(), o.script_pubkey.as_bytes()))
            .collect();
        assert_eq!(ours, theirs, "outputs of tx {i}");
    }

    let mut want = vec![
        row(
            "764b60c3d9a2c3c5bb6fe7141d9ca6e6778122df75f19366a2c5cb948d1d7d84",
            0,
            "bc1qx9t2l3pyny2spqpqlye8svce70nppwtaxwdrp4",
            629948405,
        ),
        row(
            "7bf717689b9033eafb2f3272719989b304bb7db616c2bfb5ded2e1b76d50a4f0",
            0,
            "bc1qmexsnhyukr729eclj6mesu0unyf3p0qvn6app6fu5j2xjmavay4qrx02ge",
            422939,
        ),
        row(
            "7bf717689b9033eafb2f3272719989b304bb7db616c2bfb5ded2e1b76d50a4f0",
            1,
            "bc1qxp53jp0p75cfgrryt4m8qylex8xf0j9mum8gpl",
            2297555,
        ),
        row(
            "2b22b06220e31781c94ccaa68f654d54749eb37a1ab0de9c3aadd27f075e434b",
            0,
            "3BFwifA3YAiv8TeCYMkeYnVWPcJFzsBXE3",
            1332318,
        ),
        row(
            "2b22b06220e31781c94ccaa68f654d54749eb37a1ab0de9c3aadd27f075e434b",
            1,
            "1Hf16aUW3yjzi3STTUBwA9VGgWUpDvXC1T",
            52514804,
        ),
        row(
            "f0860751a42d806208159233572f759ae94905b9f6e0b247c614922bdbbc2710",
            0,
            "3JKMCNPXvfewye4Uxk6sJZGxK74tSmL9ty",
            512419,
        ),
    ];
    want.sort();
    let addresses: Vec<&str> = want.iter().map(|r| r.2.as_str()).collect();
    let got = found(Network::Bitcoin, BLOCK_702861, &addresses);
    // An address may be paid elsewhere in the block too; the listed ones
    // must all be there, and every extra one must pay a watched address.
    for w in &want {
        assert!(got.contains(w), "missing {w:?}");
    }
    assert!(got.iter().all(|g| addresses.contains(&g.2.as_str())));
}

#[test]
fn bitcoin_100002_is_the_classic_pre_segwit_block() {
    let bytes = from_hex(BLOCK_100002_HEX).unwrap();
    let block = RawBlock::parse(&bytes).unwrap();
    assert_eq!(
        block.hash().to_string(),
        "0000000000013b8ab2cd513b0261a14096412195a72a0c4827d229dcc7e0f7af"
    );
    assert_eq!(
        block.header.prev_blockhash.to_string(),
        "00000000000080b66c911bd5ba14a74260057311eaeb1982802f7010f1a9f090"
    );
    assert_eq!(block.tx_count(), 9);
    let tx = "db60fb93d736894ed0b86cb92548920a3fe8310dd19b0da7ad97e48725e1e12e";
    let got = found(
        Network::Bitcoin,
        &bytes,
        &[
            "1AcFDzS6kF7zzFcjieVSDNfwreRyj8D4R5",
            "1NvAQz3qfdP589ZBCgaWS2WcgmqPxCpqSe",
        ],
    );
    let mut want = vec![
        row(tx, 0, "1AcFDzS6kF7zzFcjieVSDNfwreRyj8D4R5", 10000000),
        row(tx, 1, "1NvAQz3qfdP589ZBCgaWS2WcgmqPxCpqSe", 1290000000),
    ];
    want.sort();
    // The listed txid pays each address once; indexes come from the block.
    assert_eq!(got.len(), 2, "{got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((&g.0, &g.2, g.3), (&w.0, &w.2, w.3));
    }
    // The P2PK output has no address, but it is read with its value.
    let p2pk = (0..block.tx_count())
        .find(|t| {
            block.txid(*t).to_string()
                == "220ebc64e21abece964927322cba69180ed853bb187fbc6923bac7d010b9d87a"
        })
        .expect("the P2PK transaction is in the block");
    assert!(block
        .outputs(p2pk)
        .any(|o| o.value == 8888000000 && o.script.is_p2pk()));
}

#[test]
fn litecoin_2265985_with_its_hogex_and_mweb_extension_block_parses_whole() {
    let fixture: serde_json::Value = serde_json::from_str(LTC_2265985_JSON).unwrap();
    let bytes = from_hex(fixture["block"].as_str().unwrap()).unwrap();
    let block = RawBlock::parse(&bytes).unwrap();
    block
        .verify(None)
        .expect("merkle root over all 58 transactions, HogEx included");
    assert_eq!(block.hash().to_string(), fixture["hash"].as_str().unwrap());
    let listed: Vec<&str> = fixture["tx"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let ours: Vec<String> = (0..block.tx_count())
        .map(|t| block.txid(t).to_string())
        .collect();
    assert_eq!(ours, listed, "every canonical transaction, in order");
    assert_eq!(
        block.mweb_len(),
        5965,
        "the extension block is left whole, not parsed"
    );
    assert_eq!(
        bytes[bytes.len() - block.mweb_len()],
        0x01,
        "an MWEB block is present"
    );

    let hogex = "b0a867c72f417dc0a904f708ba37fa2d94c3b25a288ea6e8fbe8cd14d8ca7119";
    assert_eq!(ours.last().unwrap(), hogex);
    let mut want = vec![
        row(
            "9efd56c7048de96df7ae7bd72cf0398d2817b9027f3ef0259af7bdf376c857e8",
            0,
            "LQ5X1r32bU3v2TgVxE9osb2YnCZNFY6ikm",
            1250297663,
        ),
        row(
            "2b682b5b7c07b2d65928a0c6e374497afbe53fe1e90a93255fdd2eea1b94e63e",
            0,
            "LdgG1wAKE341qyvRtR8Tvw7jp5veonokHL",
            500000000,
        ),
        row(
            "2b682b5b7c07b2d65928a0c6e374497afbe53fe1e90a93255fdd2eea1b94e63e",
            1,
            "LTZfF8BEtHuVJCKePfasNr2D1G1sy8kkBr",
            750042496,
        ),
        row(
            "1494ae566aa3d3498a5cbb90b8f305a46467f616cb2bb62e3713c6ce3d80bbb5",
            0,
            "MW44Zj2phDHuThDfChhfT3AobxVT5GtujH",
            7177374,
        ),
        row(
            "1494ae566aa3d3498a5cbb90b8f305a46467f616cb2bb62e3713c6ce3d80bbb5",
            1,
            "ltc1qckus8nvghxwm8645ylryfuvrm60nragltssa8a",
            5310902,
        ),
        row(
            "5624f00f73c9e626967d84b0ca532cb19f0bd91ea3c399c884808983915bdfc0",
            0,
            "ltc1qljz9mslwpy86gzyekgn2hu4jt2h6vjjzrk22cs",
            2366888893,
        ),
        row(
            "5624f00f73c9e626967d84b0ca532cb19f0bd91ea3c399c884808983915bdfc0",
            1,
            "MD8t6nNeLcv55RVWERwoxjVjU2EsFFy9Zb",
            1233600000,
        ),
        // The HogEx's own output and a peg-in: canonical outputs like any other.
        row(
            hogex,
            0,
            "ltc1gxr529607w908ccru6uguk6pay5ugmvk5mdh6jj4w5dw3jj6e2dcqkulphy",
            9191015763,
        ),
        row(
            "b9ce847ba8e16e838e904f6a3b298d695048044b74db2add90b75344d3e6a026",
            0,
            "ltc1frmjteyhd56nsta6sggullrjmdgzhgcncl2nddeq2l4wf0pqxpxusc95llu",
            4217283,
        ),
    ];
    want.sort();
    let addresses: Vec<&str> = want.iter().map(|r| r.2.as_str()).collect();
    let got = found(Network::Litecoin, &bytes, &addresses);
    // Output indexes in the listing are by position; check txid, address and amount.
    for w in &want {
        assert!(
            got.iter().any(|g| g.0 == w.0 && g.2 == w.2 && g.3 == w.3),
            "missing {w:?} in {got:?}"
        );
    }
    assert!(got.iter().all(|g| addresses.contains(&g.2.as_str())));
    let total: u128 = got.iter().map(|g| g.3).sum();
    assert!(total >= want.iter().map(|w| w.3).sum::<u128>());
    let _ = Amount(total);
}

#[test]
fn a_bitcoin_watch_set_does_not_match_litecoin_lookalikes() {
    // The same 20-byte hash under Litecoin's P2PKH version is another script
    // family member only by address text; the script bytes are what match.
    let bytes = from_hex(BLOCK_100002_HEX).unwrap();
    let got = found(Network::Bitcoin, &bytes, &["1111111111111111111114oLvT2"]);
    assert!(got.is_empty());
}
