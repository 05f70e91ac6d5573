#!/usr/bin/env python3
"""Writes fuzz/seeds/ from the real mainnet fixtures in chains/*/tests/fixtures.

The fixtures are node answers in the form their sources recorded them
(hex blocks, JSON-RPC bodies, java-tron HTTP JSON); the fuzz targets take
what the watcher's sources read (binary blocks, JSON-RPC results, protobuf,
getBlock bodies), so each is rewritten into that form, its content kept.
Where an answer the source needs was not recorded (a Tron block around a
transaction, a Solana block around one), it is made up around the real
transaction and named so. Seeds whose name starts with `bad_` are refused
on purpose; every other seed must translate (tests/seeds.rs checks).

Run from the repository root: python3 fuzz/make_seeds.py
"""

import base64
import hashlib
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(ROOT, "fuzz", "seeds")
B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def fixture(chain, name):
    return os.path.join(ROOT, "chains", chain, "tests", "fixtures", name)


def load(chain, name):
    with open(fixture(chain, name)) as f:
        return json.load(f)


def write(target, name, data):
    os.makedirs(os.path.join(SEEDS, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(SEEDS, target, name), "wb") as f:
        f.write(data)


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


# --- UTXO: raw blocks, binary and hex ---------------------------------------
def utxo():
    with open(fixture("utxo", "genesis_block.hex")) as f:
        genesis = bytes.fromhex(f.read().strip())
    write("utxo_block", "bitcoin_genesis.bin", genesis)
    write("utxo_block", "bitcoin_genesis.hex", genesis.hex())
    # The genesis coinbase alone: the loose-transaction reader.
    write("utxo_block", "bitcoin_genesis_coinbase_tx.bin", genesis[81:])
    with open(fixture("utxo", "block_13b8a.hex")) as f:
        write("utxo_block", "mainnet_bitcoin_100002.bin", bytes.fromhex(f.read().strip()))
    ltc = load("utxo", "electrumx_litecoin_mainnet_2265985.json")
    write("utxo_block", "mainnet_litecoin_2265985_mweb.bin", bytes.fromhex(ltc["block"]))
    # Bitcoin block 702861 (1.4 MB) is past AFL's 1 MB input limit; the
    # seed test reads it from the fixtures.


# --- Ethereum: one object of JSON-RPC results --------------------------------
def evm():
    header = load("evm", "helios_block_21925176_txhashes.json")
    receipts = load("evm", "helios_block_21925176_receipts.json")
    transfer = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
    usdt = "0x81728f20df72fba5ec109dc1f4e6bf10745733dce1848e653a9b1b9964f18e9f"
    failed = "0xa8f2071ed22d3e8e7721f681cc36c2515adca9568388221d4c0ed3f7efd210b9"
    picked = [r for r in receipts if r["transactionHash"] in (usdt, failed)]
    picked += [r for r in receipts if r["transactionHash"] not in (usdt, failed)][:1]

    def tx(r, value="0x0"):
        # Receipts do not carry the value; these transactions move none.
        return {
            "hash": r["transactionHash"],
            "from": r["from"],
            "to": r["to"],
            "value": value,
            "blockHash": r["blockHash"],
            "blockNumber": r["blockNumber"],
            "transactionIndex": r["transactionIndex"],
            "type": r["type"],
        }

    block = {k: header[k] for k in ("number", "hash", "parentHash", "timestamp", "logsBloom")}
    block["transactions"] = [tx(r) for r in picked]
    logs = [l for r in picked if r["status"] == "0x1" for l in r["logs"] if l["topics"][:1] == [transfer]]
    write("evm_answers", "mainnet_21925176_usdt_usdc.json",
          compact({"block": block, "logs": logs}))
    # The node lost the logs (an empty eth_getLogs where the bloom has the
    # Transfer event): the receipts of the block stand in.
    write("evm_answers", "mainnet_21925176_logs_from_receipts.json",
          compact({"block": block, "logs": [], "blockReceipts": picked}))

    # Made up around the real block: ETH to a watched address, by value and
    # by an internal call that the trace shows, with their receipts.
    watched = "0x00000000000000000000000000000000000000e7"
    paying = dict(picked[0], transactionHash="0x" + "11" * 32, to=watched, logs=[], status="0x1")
    inner = dict(picked[0], transactionHash="0x" + "22" * 32, logs=[], status="0x1")
    block2 = dict(block, transactions=[tx(paying, "0xde0b6b3a7640000"), tx(inner)])
    block2["logsBloom"] = "0x" + "00" * 256
    traces = [
        {"txHash": paying["transactionHash"],
         "result": {"type": "CALL", "from": paying["from"], "to": watched, "value": "0xde0b6b3a7640000"}},
        {"txHash": inner["transactionHash"],
         "result": {"type": "CALL", "from": inner["from"], "to": inner["to"], "value": "0x0",
                    "calls": [{"type": "CALL", "from": inner["to"], "to": watched, "value": "0x5",
                               "calls": [{"type": "DELEGATECALL", "from": watched, "to": inner["to"]}]},
                              {"type": "CALL", "from": inner["to"], "to": watched, "value": "0x7",
                               "error": "execution reverted"}]}},
    ]
    write("evm_answers", "made_eth_by_value_and_trace.json",
          compact({"block": block2, "logs": [], "receipts": [paying, inner], "traces": traces}))
    write("evm_answers", "no_block.json", compact({"block": None}))
    write("evm_answers", "bad_receipt_of_another_block.json",
          compact({"block": block2, "logs": [],
                   "receipts": [dict(paying, blockHash="0x" + "33" * 32)]}))


# --- Tron: protobuf, written field by field -----------------------------------
def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def message(*fields):
    return b"".join(field(n, v) for n, v in fields if v not in (0, b""))


SUCCESS = 1  # Transaction.Result.contractResult


def tron_tx(t):
    raw = bytes.fromhex(t["raw_data_hex"])
    ret = message((3, SUCCESS), (1, t["ret"][0].get("fee", 0)))
    signed = message((1, raw), *[(2, bytes.fromhex(s)) for s in t["signature"]], (5, ret))
    return message((1, signed), (2, bytes.fromhex(t["txID"])))


def tron_info(i):
    receipt = i.get("receipt", {})
    logs = [
        message((1, bytes.fromhex(l["address"])), *[(2, bytes.fromhex(x)) for x in l["topics"]],
                (3, bytes.fromhex(l["data"])))
        for l in i.get("log", [])
    ]
    rec = message(
        (1, receipt.get("energy_usage", 0)), (2, receipt.get("energy_fee", 0)),
        (4, receipt.get("energy_usage_total", 0)), (5, receipt.get("net_usage", 0)),
        (6, receipt.get("net_fee", 0)), (7, SUCCESS if receipt.get("result") == "SUCCESS" else 0),
        (8, receipt.get("energy_penalty_total", 0)),
    )
    return message(
        (1, bytes.fromhex(i["id"])), (2, i.get("fee", 0)), (3, i["blockNumber"]),
        (4, i["blockTimeStamp"]),
        *[(5, bytes.fromhex(c)) for c in i.get("contractResult", [])],
        (6, bytes.fromhex(i.get("contract_address", ""))), (7, rec), *[(8, l) for l in logs],
    )


def tron_block_of(tx, info):
    number = info["blockNumber"]
    # The block id is the number, then 24 bytes of the header's hash, which
    # was not recorded: made up.
    blockid = number.to_bytes(8, "big") + hashlib.sha256(b"block %d" % number).digest()[:24]
    parent = (number - 1).to_bytes(8, "big") + hashlib.sha256(b"block %d" % (number - 1)).digest()[:24]
    raw = message((1, info["blockTimeStamp"]), (3, parent), (7, number))
    block = message((1, tron_tx(tx)), (2, message((1, raw))), (3, blockid))
    infos = message((1, tron_info(info)))
    return len(block).to_bytes(4, "little") + block + infos


def tron():
    trx = tron_block_of(load("tron", "gemwallet_transaction_coin_transfer.json"),
                        load("tron", "gemwallet_transaction_coin_transfer_receipt.json"))
    usdt = tron_block_of(load("tron", "ledgerlive_trongrid_tx_usdt_0130dfde.json"),
                         load("tron", "ledgerlive_gettransactioninfobyid_usdt_0130dfde.json"))
    write("tron_block", "mainnet_trx_transfer.bin", trx)
    write("tron_block", "mainnet_usdt_transfer.bin", usdt)
    write("tron_block", "no_block.bin", b"\0\0\0\0")


# --- Solana: getBlock bodies ----------------------------------------------------
def b58decode(s):
    n = 0
    for c in s:
        n = n * 58 + B58.index(c)
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * (len(s) - len(s.lstrip("1"))) + raw


def shortvec(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def wire(tx, v0=False):
    """The transaction's bytes on the wire (bincode, as base64 answers hold it)."""
    m = tx["message"]
    h = m["header"]
    body = bytes([h["numRequiredSignatures"], h["numReadonlySignedAccounts"],
                  h["numReadonlyUnsignedAccounts"]])
    body += shortvec(len(m["accountKeys"])) + b"".join(b58decode(k) for k in m["accountKeys"])
    body += b58decode(m["recentBlockhash"])
    body += shortvec(len(m["instructions"]))
    for ix in m["instructions"]:
        data = b58decode(ix["data"])
        body += bytes([ix["programIdIndex"]]) + shortvec(len(ix["accounts"])) + bytes(ix["accounts"])
        body += shortvec(len(data)) + data
    if v0:
        body = b"\x80" + body + shortvec(0)  # no lookup tables
    sigs = shortvec(len(tx["signatures"])) + b"".join(b58decode(s) for s in tx["signatures"])
    return sigs + body


def accounts_form(tx):
    m = tx["message"]
    h = m["header"]
    keys = m["accountKeys"]
    signed = h["numRequiredSignatures"]
    out = []
    for i, k in enumerate(keys):
        if i < signed:
            writable = i < signed - h["numReadonlySignedAccounts"]
        else:
            writable = i < len(keys) - h["numReadonlyUnsignedAccounts"]
        out.append({"pubkey": k, "writable": writable, "signer": i < signed, "source": "transaction"})
    return {"signatures": tx["signatures"], "accountKeys": out}


def solana():
    sol = load("solana", "gemwallet_transfer_sol_with_compute.json")["result"]
    usdc = load("solana", "gemwallet_usdc_transfer.json")["result"]

    def body(transactions, slot, previous):
        # getBlock answers name the block by hash; the block around these
        # real transactions was not recorded, so its hashes are their
        # recent blockhashes (real mainnet hashes, of other blocks).
        block = {
            "blockhash": sol["transaction"]["message"]["recentBlockhash"],
            "previousBlockhash": previous,
            "parentSlot": slot - 1,
            "blockTime": sol["blockTime"],
            "blockHeight": slot - 20_000_000,
            "transactions": transactions,
        }
        return compact({"jsonrpc": "2.0", "id": 1, "result": block})

    prev = usdc["transaction"]["message"]["recentBlockhash"]
    slot = sol["slot"]

    def entry(r, tx):
        return {"transaction": tx, "meta": r["meta"], "version": r["version"]}

    def accounts_meta(r):
        # transactionDetails "accounts" leaves out instructions and logs.
        meta = {k: v for k, v in r["meta"].items() if k not in ("innerInstructions", "logMessages")}
        return {"transaction": accounts_form(r["transaction"]), "meta": meta, "version": r["version"]}

    write("solana_block", "mainnet_accounts_sol_usdc.json",
          body([accounts_meta(sol), accounts_meta(usdc)], slot, prev))
    write("solana_block", "mainnet_full_json_sol_usdc.json",
          body([entry(sol, sol["transaction"]), entry(usdc, usdc["transaction"])], slot, prev))
    b64 = lambda r, v0=False: [base64.b64encode(wire(r["transaction"], v0)).decode(), "base64"]
    v0usdc = dict(usdc, version=0)
    v0usdc["meta"] = dict(usdc["meta"], loadedAddresses={"writable": [], "readonly": []})
    write("solana_block", "mainnet_full_base64_sol_usdc_v0.json",
          body([entry(sol, b64(sol)), entry(v0usdc, b64(usdc, True))], slot, prev))
    b58 = lambda r: [b58encode(wire(r["transaction"])), "base58"]
    write("solana_block", "mainnet_full_base58_sol.json", body([entry(sol, b58(sol))], slot, prev))
    write("solana_block", "no_transactions.json", body([], slot, prev))
    write("solana_block", "bad_skipped_slot.json", compact(
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32007, "message": "Slot 7 was skipped"}}))


def b58encode(b):
    n = int.from_bytes(b, "big")
    s = ""
    while n:
        n, r = divmod(n, 58)
        s = B58[r] + s
    return "1" * (len(b) - len(b.lstrip(b"\0"))) + s


if __name__ == "__main__":
    utxo()
    evm()
    tron()
    solana()
