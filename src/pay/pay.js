// The hosted payment page's one script: counts the time left down and
// follows the intent's live status stream. The page reads without it.
"use strict";
(function () {
  var main = document.getElementById("pay");
  if (!main) return;
  var words = JSON.parse(main.dataset.words);
  var statusEl = document.getElementById("status");
  var leftEl = document.getElementById("time-left");
  var expiresAt = Number(main.dataset.expiresAt);
  // paywatch's clock, not the customer's, which may be wrong.
  var skew = Number(main.dataset.serverTime) - Date.now();

  function say(reason, status) {
    if (reason && Object.prototype.hasOwnProperty.call(words, reason)) return words[reason];
    if (Object.prototype.hasOwnProperty.call(words, status)) return words[status];
    return "Checking this payment.";
  }

  function show(data) {
    if (!data || !data.status) return;
    statusEl.dataset.status = data.status;
    statusEl.dataset.reason = data.reason_code || "";
    statusEl.textContent = say(data.reason_code, data.status);
    if (data.server_time_ms) skew = data.server_time_ms - Date.now();
    tick();
  }

  function tick() {
    if (statusEl.dataset.status !== "awaiting_payment") {
      leftEl.textContent = "\u2014";
      return;
    }
    var secs = Math.max(0, Math.floor((expiresAt - (Date.now() + skew)) / 1000));
    leftEl.textContent = secs > 0
      ? Math.floor(secs / 60) + ":" + String(secs % 60).padStart(2, "0")
      : "Expired: do not send to this address";
  }

  tick();
  setInterval(tick, 1000);

  if (!window.EventSource) return;
  // An EventSource reconnects by itself with Last-Event-ID after a dropped
  // connection, but gives up for good on an error answer (a 503 while the
  // server is busy, say): then a new one is opened after a pause that
  // doubles to a minute, and it starts from the intent's state, so the
  // page never stays on an old status. Once paid, nothing more is awaited.
  var pause = 2000;
  var events = null;
  function listen() {
    events = new EventSource(main.dataset.events);
    events.addEventListener("snapshot", got);
    events.addEventListener("status", got);
    events.onopen = function () { pause = 2000; };
    events.onerror = function () {
      if (events.readyState !== EventSource.CLOSED) return;
      setTimeout(listen, pause);
      pause = Math.min(pause * 2, 60000);
    };
  }
  function got(e) {
    var data = JSON.parse(e.data);
    show(data);
    if (data.paid === true && events) events.close();
  }
  listen();
})();
