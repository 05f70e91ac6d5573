"""Helpers for benches/burst.sh (standard library only).

  burst.py post URL --count N --conns C --asset A --network NET [--prefix P]
               [--at-once [--retries R]]
      POST /v1/intents N times (token from $PAYWATCH_TOKEN), each with a
      fresh reference. Without --at-once, C keep-alive connections send one
      request after another until N are sent (issuing a pool); a request
      whose connection fails is counted as unanswered, never sent again.
      With --at-once, N connections are opened at the same moment, each
      sending its request once connected, with an Idempotency-Key; one whose
      connection fails (refused, reset, timed out) is sent again with the
      same key, up to R more times. Prints one JSON line: status counts,
      failed attempts, seconds, latency of the burst's requests, and the
      ids of the intents answered (201 made now, 200 made by an earlier
      attempt under the same key).
  burst.py rss PID OUT
      Samples /proc/PID/status every 100 ms until PID exits or SIGTERM:
      each line "ms rss_kib hwm_kib"; the last line read is the peak so far.
"""
import asyncio
import json
import os
import signal
import sys
import time


def request(host, token, asset, network, reference, key=None):
    body = json.dumps({
        "kind": "order", "reference": reference, "account": "acct-burst",
        "asset": asset, "network": network, "usd_amount": "50",
    }).encode()
    head = (f"POST /v1/intents HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            + (f"Idempotency-Key: {key}\r\n" if key else "") + "\r\n").encode()
    return head + body


async def read_answer(reader):
    """Status and body of one HTTP/1.1 answer (Content-Length or chunked)."""
    line = await reader.readline()
    if not line:
        raise ConnectionError("closed before an answer")
    status = int(line.split()[1])
    length, chunked, close = 0, False, False
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "connection" and value == "close":
            close = True
    if chunked:
        body = b""
        while True:
            size = int((await reader.readline()).strip(), 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        body = await reader.readexactly(length)
    return status, body, close


class Tally:
    def __init__(self):
        self.status, self.errors, self.ids, self.transport = {}, {}, [], {}

    def answer(self, status, body):
        self.status[str(status)] = self.status.get(str(status), 0) + 1
        if status in (200, 201):
            self.ids.append(json.loads(body)["id"])
        elif len(self.errors) < 20:
            key = f"{status}: {body[:200].decode(errors='replace')}"
            self.errors[key] = self.errors.get(key, 0) + 1

    def fail(self, e):
        key = f"transport: {type(e).__name__}: {e}"[:200]
        self.status["no answer"] = self.status.get("no answer", 0) + 1
        self.errors[key] = self.errors.get(key, 0) + 1


async def post(args):
    url = args["url"].removeprefix("http://").rstrip("/")
    host, port = url.rsplit(":", 1)
    token = os.environ["PAYWATCH_TOKEN"]
    n, conns, prefix = int(args["count"]), int(args["conns"]), args.get("prefix", "burst")
    asset, network = args["asset"], args["network"]
    tally = Tally()
    t0 = time.monotonic()

    if "at-once" in args:
        # N requests fired together: every connect starts at once and sends
        # its POST as soon as it is connected. Each carries an
        # Idempotency-Key, so a request whose connection failed (refused,
        # reset, no answer in time) is sent again with the same key, as a
        # storefront would: a second attempt answers with the intent the
        # first one made, if it made one, never a second intent.
        retries = int(args.get("retries", 8))
        latencies, attempts = [], {}

        async def one(i):
            key = f"{prefix}-{i}"
            started = time.monotonic()
            for attempt in range(retries + 1):
                writer = None
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(host, int(port)), 300)
                    writer.write(request(url, token, asset, network, key, key))
                    await writer.drain()
                    status, body, _ = await asyncio.wait_for(read_answer(reader), 300)
                    latencies.append(time.monotonic() - started)
                    attempts[attempt + 1] = attempts.get(attempt + 1, 0) + 1
                    tally.answer(status, body)
                    return
                except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                    kind = f"attempt failed: {type(e).__name__}: {e}"[:120]
                    tally.transport[kind] = tally.transport.get(kind, 0) + 1
                    await asyncio.sleep(min(10.0, 0.5 * 2 ** attempt))
                finally:
                    if writer is not None:
                        writer.close()
            tally.fail(ConnectionError(f"no answer after {retries + 1} attempts"))

        await asyncio.gather(*(one(i) for i in range(n)))
        latencies.sort()
        pct = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3) if latencies else None  # noqa: E731
        extra = {"answered_after_attempts": attempts, "transport_failures": tally.transport,
                 "p50_s": pct(0.5), "p99_s": pct(0.99), "max_s": pct(1.0)}
    else:
        counter = iter(range(n))

        async def worker():
            reader = writer = None
            for i in counter:
                for attempt in range(5):
                    try:
                        if writer is None:
                            reader, writer = await asyncio.open_connection(host, int(port))
                        writer.write(request(url, token, asset, network, f"{prefix}-{i}"))
                        await writer.drain()
                        status, body, close = await asyncio.wait_for(read_answer(reader), 120)
                        tally.answer(status, body)
                        if close:
                            writer.close()
                            writer = None
                        break
                    except (OSError, ConnectionError, asyncio.IncompleteReadError) as e:
                        # A request that got no answer may or may not have
                        # made an intent: count it, do not resend it.
                        if writer is not None:
                            writer.close()
                        writer = None
                        tally.fail(e)
                        break
            if writer is not None:
                writer.close()

        await asyncio.gather(*(worker() for _ in range(conns)))
        extra = {}
    secs = time.monotonic() - t0
    print(json.dumps({"sent": n, "status": tally.status, "errors": tally.errors,
                      "seconds": round(secs, 3), "per_s": round(n / secs, 1), **extra,
                      "ids": sorted(tally.ids)}))


def rss(pid, out):
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    t0 = time.monotonic()
    with open(out, "w", buffering=1) as f:
        while not stop:
            try:
                with open(f"/proc/{pid}/status") as s:
                    fields = dict(line.split(":", 1) for line in s)
            except (FileNotFoundError, ProcessLookupError):
                break
            if "VmHWM" not in fields:  # a zombie: the process has exited
                break
            kib = lambda k: int(fields[k].split()[0])  # noqa: E731
            f.write(f"{int((time.monotonic() - t0) * 1000)} {kib('VmRSS')} {kib('VmHWM')}\n")
            time.sleep(0.1)


def main():
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "rss":
        rss(int(rest[0]), rest[1])
        return
    args = {"url": rest[0]}
    it = iter(rest[1:])
    for flag in it:
        key = flag.removeprefix("--")
        args[key] = True if key == "at-once" else next(it)
    asyncio.run(post(args))


if __name__ == "__main__":
    main()
