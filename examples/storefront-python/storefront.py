#!/usr/bin/env python3
"""A storefront on paywatch, in Python: what a shop does, step by step.

1. Asks paywatch for a payment intent for an order and for a balance top-up,
   and shows the customer where to pay and how much.
2. Follows the event feed from PostgreSQL as the read-only storefront role:
   LISTEN for a hint, then read `paywatch_events` from the cursor it kept,
   in the same transaction as the changes each event causes in the shop's
   own database. Its connection is cut on purpose once, and it resumes from
   its cursor: no event skipped, none handled twice.
3. Pays a second order from the account's balance.
4. Shows a support decision arriving as an event: a customer who paid one
   order twice (two browser tabs) gets a refund of the second payment. The
   decision is support's (normally in the operator console); this script
   plays support's part with support's token only to make it happen.
5. Receives the same events as webhooks throughout, checks each signature,
   and keeps the highest cursor per order so a redelivered old body changes
   nothing; at the end it checks every event came, and that a forged
   request is refused.

The shop's own database here is a SQLite file (Python's standard library);
yours is whatever your shop runs on. Only psycopg is needed beyond the
standard library (requirements.txt). Run it against a paywatch that serves
its API and whose dev chain pays every intent (see README.md beside this).

Environment:
  PAYWATCH_API             the API, e.g. http://127.0.0.1:8088
  PAYWATCH_TOKEN           the storefront's token
  STOREFRONT_DATABASE_URL  postgres://storefront:...@host:5432/paywatch
  PAYWATCH_SUPPORT_TOKEN   support's token, for step 4 (skipped without it)
  REFUND_ADDRESS           where support sends step 4's refund
  WEBHOOK_LISTEN           host:port paywatch's webhooks.url points at
                           (step 5 is skipped without it)
  WEBHOOK_SECRET           paywatch's webhooks.secret
  SHOP_DB                  the shop's SQLite file (default shop.db)
  ACCOUNT                  the customer's account (default cust-7)
  RUN                      a suffix for this run's order references
                           (default: the time), so runs never collide

It exits non-zero, saying why, if any step does not end as a shop expects.
Its last line is a JSON summary that tests/storefront_python.rs checks.
"""

import hashlib
import hmac
import json
import os
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg

FEED_PAGE = 500
# A webhook older than this is refused: a captured request replayed later.
WEBHOOK_TOLERANCE_SECS = 300


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        sys.exit(f"storefront.py: set {name} (see the top of this file)")
    return value


class PaywatchError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


class Paywatch:
    """paywatch's HTTP API: JSON in and out, errors as PaywatchError."""

    def __init__(self, base, token):
        self.base, self.token = base.rstrip("/"), token

    def call(self, method, path, body=None, key=None):
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if key is not None:
            # The same key answers the same result: a retry after a timeout
            # never makes a second intent, debit or decision.
            headers["Idempotency-Key"] = key
        request = urllib.request.Request(self.base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            answer = json.load(e)
            error = answer.get("error", {})
            raise PaywatchError(e.code, error.get("code"), error.get("message")) from None

    def create_intent(self, kind, reference, account, asset, network, usd, key):
        return self.call(
            "POST",
            "/v1/intents",
            {
                "kind": kind,
                "reference": reference,
                "account": account,
                "asset": asset,
                "network": network,
                "usd_amount": usd,
            },
            key,
        )


class Shop:
    """The shop's own database: its orders, and the feed's cursor beside them."""

    def __init__(self, path):
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.lock = threading.Lock()
        self.db.executescript(
            """
            CREATE TABLE IF NOT EXISTS orders (
                kind TEXT, reference TEXT, account TEXT,
                paid INTEGER NOT NULL, paid_via TEXT, payment_status TEXT,
                usd_due_cents INTEGER, latest_reason_code TEXT, latest_outcome TEXT,
                PRIMARY KEY (kind, reference));
            CREATE TABLE IF NOT EXISTS feed (
                one INTEGER PRIMARY KEY CHECK (one = 1), cursor INTEGER NOT NULL);
            INSERT OR IGNORE INTO feed VALUES (1, 0);
            -- What this example handled, to show nothing was skipped or doubled.
            CREATE TABLE IF NOT EXISTS handled (
                cursor INTEGER PRIMARY KEY, topic TEXT, event TEXT, kind TEXT, reference TEXT,
                payload TEXT);
            CREATE TABLE IF NOT EXISTS webhooks (
                delivery INTEGER PRIMARY KEY, cursor INTEGER, event TEXT);
            CREATE TABLE IF NOT EXISTS webhook_heads (
                kind TEXT, reference TEXT, cursor INTEGER, PRIMARY KEY (kind, reference));
            """
        )

    def cursor(self):
        with self.lock:
            return self.db.execute("SELECT cursor FROM feed").fetchone()[0]

    def apply(self, event, order):
        """One event and the order's answer, in one transaction with the cursor:
        a crash between two events resumes after the last one committed."""
        cursor, topic, kind, reference, payload = event
        body = json.loads(payload) if isinstance(payload, str) else payload
        with self.lock:
            self.db.execute("BEGIN")
            try:
                self.db.execute(
                    "INSERT INTO handled VALUES (?, ?, ?, ?, ?, ?)",
                    (cursor, topic, body["event"], kind, reference, json.dumps(body)),
                )
                if order is not None:
                    self.db.execute(
                        "INSERT OR REPLACE INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        order,
                    )
                self.db.execute("UPDATE feed SET cursor = ? WHERE one = 1", (cursor,))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def order(self, kind, reference):
        with self.lock:
            row = self.db.execute(
                "SELECT paid, paid_via, payment_status, latest_reason_code, latest_outcome "
                "FROM orders WHERE kind = ? AND reference = ?",
                (kind, reference),
            ).fetchone()
        keys = ("paid", "paid_via", "payment_status", "latest_reason_code", "latest_outcome")
        return dict(zip(keys, row)) if row else None

    def handled(self, after=0):
        with self.lock:
            return self.db.execute(
                "SELECT cursor, topic, event, kind, reference, payload FROM handled "
                "WHERE cursor > ? ORDER BY cursor",
                (after,),
            ).fetchall()


class Feed:
    """paywatch's event feed, followed from the shop's cursor.

    NOTIFY on `paywatch_outbox` only says "read now": any session may send
    one, and none arrives while disconnected. The truth is `paywatch_events`
    read from the stored cursor, so a reconnect just reads again from there.
    """

    def __init__(self, url, shop):
        self.url, self.shop = url, shop
        self.conn = None
        self.reconnects = 0

    def connect(self):
        self.conn = psycopg.connect(self.url, autocommit=True)
        self.conn.execute("LISTEN paywatch_outbox")

    def catch_up(self):
        while True:
            rows = self.conn.execute(
                "SELECT cursor, topic, kind, reference, payload FROM paywatch_events "
                "WHERE cursor > %s ORDER BY cursor LIMIT %s",
                (self.shop.cursor(), FEED_PAGE),
            ).fetchall()
            for row in rows:
                _, _, kind, reference, _ = row
                self.shop.apply(row, self.answer(kind, reference))
            if len(rows) < FEED_PAGE:
                return

    def answer(self, kind, reference):
        """The one answer per order, read again on each of its events."""
        if reference is None:
            return None
        row = self.conn.execute(
            "SELECT kind, reference, account, paid, paid_via, payment_status, usd_due_cents, "
            "latest_reason_code, latest_outcome FROM paywatch_payment_status "
            "WHERE kind = %s AND reference = %s",
            (kind, reference),
        ).fetchone()
        return tuple(row) if row else None

    def wait_for(self, what, done, timeout=90):
        """Follows the feed until done() holds, reconnecting as needed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.conn is None or self.conn.closed:
                    self.connect()
                self.catch_up()
                if done():
                    return
                # Wake on the next hint, or look again in a second anyway.
                for _ in self.conn.notifies(timeout=1.0, stop_after=1):
                    pass
            except psycopg.OperationalError as e:
                self.reconnects += 1
                print(f"  feed connection lost ({str(e).strip()}); resuming from "
                      f"cursor {self.shop.cursor()}")
                self.conn = None
                time.sleep(0.2)
        sys.exit(f"storefront.py: gave up waiting for {what} after {timeout}s")

    def cut_connection(self):
        """What a network blip, a failover or a server restart does to the
        listening session: the same role may end its own sessions."""
        pid = self.conn.info.backend_pid
        with psycopg.connect(self.url, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))


def webhook_receiver(shop, secret, listen):
    """Accepts paywatch's webhooks: verifies, then de-duplicates."""
    host, port = listen.rsplit(":", 1)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if not verified(secret, self.headers, body):
                self.send_response(401)
                self.end_headers()
                return
            event = json.loads(body)
            delivery = int(self.headers["Paywatch-Delivery"])
            key = (event.get("kind"), event.get("reference"))
            with shop.lock:
                shop.db.execute(
                    "INSERT OR IGNORE INTO webhooks VALUES (?, ?, ?)",
                    (delivery, event["cursor"], event["event"]),
                )
                head = shop.db.execute(
                    "SELECT cursor FROM webhook_heads WHERE kind IS ? AND reference IS ?", key
                ).fetchone()
                # A redelivered body older than what this order already
                # showed is not news: keep the newest state.
                if head is None or event["cursor"] > head[0]:
                    shop.db.execute(
                        "INSERT OR REPLACE INTO webhook_heads VALUES (?, ?, ?)",
                        (*key, event["cursor"]),
                    )
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, int(port)), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def verified(secret, headers, body):
    """`Paywatch-Signature: v2=<hex HMAC-SHA256(secret, "<timestamp>.<delivery>.<body>")>`
    over the body exactly as received, compared in constant time."""
    try:
        timestamp = int(headers["Paywatch-Timestamp"])
        delivery = int(headers["Paywatch-Delivery"])
        signature = headers["Paywatch-Signature"]
    except (KeyError, TypeError, ValueError):
        return False
    if abs(time.time() - timestamp) > WEBHOOK_TOLERANCE_SECS:
        return False
    signed = f"{timestamp}.{delivery}.".encode() + body
    expected = "v2=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, signature)


def forged_webhook_is_refused(listen):
    """A request signed with another secret must change nothing."""
    body = json.dumps({"event": "settlement.settled", "cursor": 10**9, "kind": "order",
                       "reference": "forged"}).encode()
    timestamp = str(int(time.time()))
    bad = "v2=" + hmac.new(b"not-the-secret", f"{timestamp}.1.".encode() + body,
                           hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"http://{listen}/paywatch", body,
        {"Paywatch-Timestamp": timestamp, "Paywatch-Delivery": "1",
         "Paywatch-Signature": bad, "Content-Type": "application/json"},
        method="POST")
    try:
        urllib.request.urlopen(request, timeout=10)
    except urllib.error.HTTPError as e:
        return e.code == 401
    return False


def require(condition, why):
    if not condition:
        sys.exit(f"storefront.py: {why}")


def main():
    api = Paywatch(env("PAYWATCH_API"), env("PAYWATCH_TOKEN"))
    shop = Shop(env("SHOP_DB", "shop.db"))
    feed = Feed(env("STOREFRONT_DATABASE_URL"), shop)
    account = env("ACCOUNT", "cust-7")
    run = env("RUN", str(int(time.time())))
    listen = os.environ.get("WEBHOOK_LISTEN")
    if listen:
        webhook_receiver(shop, env("WEBHOOK_SECRET"), listen)
    start = shop.cursor()

    print("1. an order and a top-up, each with its own address and exact amount")
    order, topup = f"order-{run}-1", f"topup-{run}"
    for kind, reference in (("order", order), ("topup", topup)):
        i = api.create_intent(kind, reference, account, "BTC", "bitcoin", "100",
                              key=f"{reference}-checkout")
        print(f"  {kind} {reference}: pay {i['amount_due_coin']} {i['asset']} on "
              f"{i['network']} to {i['address']} before {i['expires_at_ms']} "
              f"({i['payment']['uri']})")

    print("2. follow the feed; the connection is cut once and resumes from the cursor")
    feed.connect()
    feed.wait_for("a first event", lambda: shop.cursor() > start)
    feed.cut_connection()
    feed.wait_for(f"{order} paid and {topup} credited",
                  lambda: all((shop.order(k, r) or {}).get("paid") == 1
                              for k, r in (("order", order), ("topup", topup))))
    require(feed.reconnects >= 1, "the cut connection was never noticed")
    print(f"  {order}: {shop.order('order', order)}")
    print(f"  {topup}: {shop.order('topup', topup)}")

    print("3. a second order paid from the balance")
    balance = api.call("GET", f"/v1/accounts/{account}/balance")
    print(f"  balance {balance['available_usd']} USD available, "
          f"{balance['pending_usd']} pending")
    second = f"order-{run}-2"
    api.call("POST", f"/v1/accounts/{account}/debits",
             {"usd_amount": "30", "order": second}, key=f"{second}-balance")
    feed.wait_for(f"{second} paid from the balance",
                  lambda: (shop.order("order", second) or {}).get("paid_via") == "balance")
    after = api.call("GET", f"/v1/accounts/{account}/balance")
    print(f"  {second}: {shop.order('order', second)}; balance now "
          f"{after['available_usd']} USD")

    refund_intent = None
    support_token = os.environ.get("PAYWATCH_SUPPORT_TOKEN")
    if support_token:
        print("4. paid twice in two tabs: support refunds the second payment")
        twice = f"order-{run}-3"
        tabs = [api.create_intent("order", twice, account, "BTC", "bitcoin", "40",
                                  key=f"{twice}-tab-{tab}") for tab in ("a", "b")]
        ids = [t["id"] for t in tabs]

        def doubled():
            for cursor, topic, event, kind, reference, payload in shop.handled(start):
                body = json.loads(payload)
                if (topic == "intent.status" and reference == twice
                        and body["status"] == "needs_review"):
                    return body["intent_id"]
            return None

        feed.wait_for(f"{twice}'s second payment in the review queue",
                      lambda: doubled() is not None)
        refund_intent = doubled()
        require(refund_intent in ids, f"intent {refund_intent} is not one of {ids}")
        support = Paywatch(env("PAYWATCH_API"), support_token)
        support.call("POST", f"/v1/cases/{refund_intent}/actions",
                     {"action": "refund_required", "note": "paid twice in two tabs",
                      "actor": "support-desk", "destination": env("REFUND_ADDRESS")},
                     key=f"{twice}-refund")

        def decided():
            seen = [(topic, json.loads(payload))
                    for _, topic, _, _, reference, payload in shop.handled(start)
                    if reference == twice]
            decision = [b for t, b in seen if t == "decision"]
            resolved = [b for t, b in seen if t == "intent.status"
                        and b["intent_id"] == refund_intent and b["status"] == "resolved"]
            return decision and resolved and resolved[-1]["outcome"] == "refund_required"

        feed.wait_for("support's decision on the feed", decided)
        print(f"  intent {refund_intent}: refund required; {twice}: "
              f"{shop.order('order', twice)}")

    # Every event, once, in order: what was handled is the feed itself.
    with psycopg.connect(env("STOREFRONT_DATABASE_URL")) as check:
        feed_cursors = [r[0] for r in check.execute(
            "SELECT cursor FROM paywatch_events WHERE cursor > %s AND cursor <= %s "
            "ORDER BY cursor", (start, shop.cursor()))]
    handled = [r[0] for r in shop.handled(start)]
    require(handled == feed_cursors,
            f"handled {len(handled)} events, the feed has {len(feed_cursors)}")

    webhooks = None
    if listen:
        print("5. the same events as signed webhooks")
        deadline = time.monotonic() + 60
        while True:
            with shop.lock:
                got = {r[0] for r in shop.db.execute("SELECT cursor FROM webhooks")}
            if set(handled) <= got:
                break
            require(time.monotonic() < deadline,
                    f"webhooks for cursors {sorted(set(handled) - got)[:10]} never came")
            time.sleep(0.5)
        require(forged_webhook_is_refused(listen), "a forged webhook was accepted")
        webhooks = len(got)
        print(f"  {webhooks} verified deliveries; a forged one was refused")

    summary = {
        "start_cursor": start,
        "last_cursor": shop.cursor(),
        "events_handled": len(handled),
        "reconnects": feed.reconnects,
        "orders": {f"{k}:{r}": shop.order(k, r) for k, r in (
            ("order", order), ("topup", topup), ("order", second))},
        "balance_usd": after["available_usd"],
        "refund_intent": refund_intent,
        "webhooks_verified": webhooks,
    }
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
