//! The operator console in a real headless Chromium, on both databases:
//! support signs in, opens the review queue, opens a late payment's case,
//! accepts it and sees it leave the queue, credited once however often the
//! form is sent; an operator sees but cannot act; a wrong token, a
//! storefront token and a form posted from another site are refused.
//!
//! Needs /usr/bin/chromium and /usr/bin/chromedriver
//! (`apt-get install chromium chromium-driver`); without them it fails.

#[macro_use]
mod common;

use common::api::{context_with_role_tokens, ApiClient, OPERATOR, STOREFRONT, SUPPORT};
use common::browser::Browser;
use common::{Backend, Harness};
use paywatch::clock::Clock;
use paywatch::reconcile::{Exception, Status};
use paywatch_core::{Asset, Network};
use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::{Client, StatusCode};

/// A note no page may run: it must come back as text.
const HOSTILE_NOTE: &str = "paid 2 min late <script>window.pwned=1</script> & ok";

struct World {
    h: Harness,
    base: String,
    /// Plain HTTP, redirects not followed: for what a browser would not do.
    http: Client,
}

impl World {
    async fn new(b: Backend) -> World {
        let mut h = Harness::new(b, Network::Litecoin, 1).await;
        h.import_pool(6).await;
        let ctx = context_with_role_tokens(&h);
        let base = ApiClient::serve(ctx).await.base;
        let http = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        World { h, base, http }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A top-up paid in full only after it expired: needs review, late.
    /// Its id and the payment's txid.
    async fn paid_late(&mut self, reference: &str) -> (i64, String) {
        let i = self.h.create("topup", reference, "LTC", "100").await;
        self.h.pass_expiry(&i);
        self.h.sync().await;
        let txid = self.h.pay(&i.address, Asset::Ltc, i.amount_due);
        self.h.mine(1);
        self.h.sync().await;
        let r = self.h.intent(i.id).await;
        assert_eq!(r.status, Status::NeedsReview, "{:?}", r.reason);
        assert_eq!(r.exception, Some(Exception::PaidLate));
        (i.id, txid)
    }

    async fn audit_entries(&self) -> i64 {
        self.h.count("SELECT COUNT(*) FROM audit_log").await
    }

    /// Signs the browser in with `token` from the login page.
    async fn sign_in(&self, browser: &Browser, token: &str) {
        browser.goto(&self.url("/console/login")).await;
        browser.type_into("#token", token).await;
        browser.click("#sign-in").await;
    }

    /// The console cookie `token` signs in with, as the login answers it.
    async fn session_cookie(&self, token: &str) -> String {
        let r = self
            .http
            .post(self.url("/console/login"))
            .header("origin", &self.base)
            .header("sec-fetch-site", "same-origin")
            .form(&[("token", token)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let set = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
        set.split(';').next().unwrap().to_owned()
    }

    /// Posts an action form as a browser would, with `extra` headers.
    async fn post_action(
        &self,
        id: i64,
        cookie: &str,
        form: &[(&str, &str)],
        extra: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(self.url(&format!("/console/cases/{id}/actions")))
            .header("cookie", cookie)
            .form(form);
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        req.send().await.unwrap()
    }
}

/// A URL whose path (its query aside) ends with `path`.
fn on_path(path: impl Into<String>) -> impl Fn(&str) -> bool {
    let path = path.into();
    move |url: &str| url.split('?').next().is_some_and(|u| u.ends_with(&path))
}

on_both_databases!(
    support_accepts_a_late_payment_in_the_browser_and_it_leaves_the_queue,
    an_operator_sees_but_cannot_act_and_strangers_and_other_sites_are_refused,
    the_overview_counts_todays_intents_the_money_settled_and_the_queue,
    an_operator_marks_a_balance_gap_handled_in_the_browser_once,
);

/// The balance backstop's finding, as the watcher records it: 0.5 ETH more
/// at an issued address than any transfer explains.
const GAP: &str = "INSERT INTO balance_gaps (network, address, intent_id, height, node_balance, \
                   counted, unexplained, found_at) \
                   VALUES ('ethereum', '0x00000000000000000000000000000000000000aa', NULL, 80, \
                   '500000000000000000', '0', '500000000000000000', 0)";

async fn an_operator_marks_a_balance_gap_handled_in_the_browser_once(b: Backend) {
    let w = World::new(b).await;
    w.h.store.execute_raw(GAP).await.expect("a balance gap");
    let id = w.h.count("SELECT MAX(id) FROM balance_gaps").await;
    let browser = Browser::start().await;
    w.sign_in(&browser, OPERATOR).await;
    browser
        .wait_for_url("the overview", on_path("/console/overview"))
        .await;
    browser.goto(&w.url("/console/queue")).await;
    let row = browser.text(&format!("#gap-{id}")).await;
    assert!(
        row.contains("500000000000000000 base units") && row.contains("ethereum"),
        "{row}"
    );

    // Without a note saying what was done, it is refused by name.
    let cookie = w.session_cookie(SUPPORT).await;
    let post = |form: [(&'static str, &'static str); 2], site: &'static str| {
        let req = w
            .http
            .post(w.url(&format!("/console/balance-gaps/{id}/handled")))
            .header("cookie", &cookie)
            .header("sec-fetch-site", site)
            .form(&form);
        async move { req.send().await.unwrap() }
    };
    let bare = post([("actor", "bo"), ("note", " ")], "same-origin").await;
    assert_eq!(bare.status(), StatusCode::BAD_REQUEST);
    let page = bare.text().await.unwrap();
    assert!(page.contains("note: missing field"), "{page}");
    assert_eq!(w.h.count(OPEN_GAPS).await, 1);

    browser
        .type_into(
            &format!("#handle-gap-{id} textarea[name='note']"),
            HOSTILE_NOTE,
        )
        .await;
    browser
        .type_into(&format!("#handle-gap-{id} input[name='actor']"), "ana")
        .await;
    browser.click(&format!("#handle-gap-{id} button")).await;
    browser
        .wait_for_url("the queue after marking", |u| u.contains("?handled="))
        .await;
    let result = browser.text("#result").await;
    assert!(
        result.contains("marked handled by ana") && result.contains(HOSTILE_NOTE),
        "the note shown as text: {result}"
    );
    assert!(!browser.source().await.contains("<script>window.pwned"));
    assert!(browser.find_all(&format!("#gap-{id}")).await.is_empty());
    assert_eq!(w.h.count(OPEN_GAPS).await, 0);
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM balance_gaps WHERE handled_by = 'ana'")
            .await,
        1
    );

    // Marked a second time (another tab, a second person): refused, naming
    // who did it first, and the first mark stands.
    let again = post([("actor", "bo"), ("note", "refunded too")], "same-origin").await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let page = again.text().await.unwrap();
    assert!(
        page.contains("already_handled") && page.contains("marked handled by ana"),
        "{page}"
    );
    assert_eq!(
        w.h.count("SELECT COUNT(*) FROM balance_gaps WHERE handled_by = 'bo'")
            .await,
        0
    );

    // A form another site's page posts is refused before anything is read.
    w.h.store
        .execute_raw(&GAP.replace("00aa'", "00bb'"))
        .await
        .unwrap();
    let other = w.h.count("SELECT MAX(id) FROM balance_gaps").await;
    let forged = w
        .http
        .post(w.url(&format!("/console/balance-gaps/{other}/handled")))
        .header("cookie", &cookie)
        .header("sec-fetch-site", "cross-site")
        .form(&[("actor", "mallory"), ("note", "nothing to see")])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    assert_eq!(w.h.count(OPEN_GAPS).await, 1);
    browser.quit().await;
}

const OPEN_GAPS: &str = "SELECT COUNT(*) FROM balance_gaps WHERE handled_at IS NULL";

async fn the_overview_counts_todays_intents_the_money_settled_and_the_queue(b: Backend) {
    let mut w = World::new(b).await;
    // Two orders paid, one left to expire, one in review (paid late):
    // 100 + 50 USD settled, one case waiting.
    let paid = w.h.create("order", "ov-1", "LTC", "100").await;
    let paid_too = w.h.create("order", "ov-2", "LTC", "50").await;
    let _expires = w.h.create("order", "ov-3", "LTC", "20").await;
    for i in [&paid, &paid_too] {
        w.h.pay(&i.address, Asset::Ltc, i.amount_due);
    }
    w.h.mine(2);
    w.h.sync().await;
    let (late, _) = w.paid_late("ov-4").await;
    w.h.clock.advance_secs(3 * 60);
    let operator = w.session_cookie(OPERATOR).await;
    let r = w
        .http
        .get(w.url("/console"))
        .header("cookie", &operator)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page = r.text().await.unwrap();
    let cut = |from: &str| {
        let start = page
            .find(from)
            .unwrap_or_else(|| panic!("no {from} in\n{page}"));
        let end = page[start..]
            .find("</table>")
            .map_or(page.len(), |e| start + e);
        page[start..end].to_owned()
    };
    assert!(
        page.contains(
            "<strong>1</strong> waiting; the longest unchanged for <strong id=\"queue-age\">3m 00s</strong>"
        ),
        "{page}"
    );
    // Today's intents of LTC: 2 paid, 1 expired, 1 in review, 4 in all.
    let today = cut("id=\"intents-today\"");
    assert!(
        today.contains("<td>LTC on litecoin</td><td>0</td><td>0</td><td>2</td><td>1</td><td>1</td><td>0</td><td>4</td>"),
        "{today}"
    );
    let settled = cut("id=\"settled\"");
    assert!(
        settled
            .contains("<td>LTC on litecoin</td><td>2</td><td>150.00</td><td>2</td><td>150.00</td>"),
        "{settled}"
    );
    assert!(page.contains("id=\"settled-week-usd\">150.00<"), "{page}");
    // The charts are drawn on the server: an SVG each, no script.
    assert_eq!(page.matches("<svg class=\"spark\"").count(), 2, "{page}");
    assert!(!page.contains("<script"));
    let watchers = cut("id=\"watcher-states\"");
    assert!(watchers.contains("<td>litecoin</td>"), "{watchers}");
    assert_eq!(w.h.intent(late).await.status, Status::NeedsReview);
    w.h.dispose().await;
}

async fn support_accepts_a_late_payment_in_the_browser_and_it_leaves_the_queue(b: Backend) {
    let mut w = World::new(b).await;
    let (id, txid) = w.paid_late("late-topup").await;
    let reason = w.h.intent(id).await.reason.expect("a reason");
    let browser = Browser::start().await;

    // Not signed in: the queue sends the browser to the login page.
    browser.goto(&w.url("/console/queue")).await;
    browser
        .wait_for_url("the login page", on_path("/console/login"))
        .await;

    // Signed in, the console opens on its overview: the queue's size and
    // age first, then each watcher, the intents and the money settled.
    w.sign_in(&browser, SUPPORT).await;
    browser
        .wait_for_url("the overview", on_path("/console/overview"))
        .await;
    let waiting = browser.text("#queue-size").await;
    assert!(
        waiting.starts_with("1 waiting; the longest unchanged for"),
        "{waiting}"
    );
    let watchers = browser.text("#watcher-states").await;
    assert!(watchers.contains("litecoin"), "{watchers}");
    let today = browser.text("#intents-week").await;
    assert!(today.contains("LTC on litecoin"), "{today}");
    browser.click("#queue-size a").await;
    browser
        .wait_for_url("the review queue", on_path("/console/queue"))
        .await;
    let cookie = browser.cookie("paywatch_session").await;
    assert_eq!(cookie["httpOnly"], true, "{cookie}");
    assert_eq!(cookie["sameSite"], "Strict", "{cookie}");
    assert_eq!(cookie["path"], "/console", "{cookie}");
    let value = cookie["value"].as_str().unwrap();
    assert!(
        !value.contains(SUPPORT) && !value.contains(&hex::encode(SUPPORT)),
        "the cookie holds a session id, not the token"
    );
    assert_eq!(browser.text("#role").await, "support");

    // The queue: the case with its exception, reason and transfer.
    let row = browser.text(&format!("#case-{id}")).await;
    assert!(row.contains("paid_late"), "{row}");
    assert!(row.contains(&reason), "{row}");
    assert!(row.contains("late-topup"), "{row}");
    assert!(row.contains(&txid), "{row}");
    assert!(row.contains("1 LTC"), "100 USD at 100 USD/LTC: {row}");

    // The case: everything about it, and support's forms.
    browser.click(&format!("#case-{id} a")).await;
    browser
        .wait_for_url("the case", on_path(format!("/console/cases/{id}")))
        .await;
    let intent = browser.text("#intent").await;
    assert!(intent.contains("needs_review"), "{intent}");
    assert!(intent.contains(&reason), "{intent}");
    assert!(browser.text("#transfers").await.contains(&txid));
    assert!(browser.text("#rate").await.contains("100"));
    assert!(browser.text("#history").await.contains("needs_review"));
    assert!(browser.text("#audit-empty").await.contains("No action"));
    assert_eq!(browser.find_all("form[id^='action-']").await.len(), 5);
    let key = browser
        .attribute("#action-accept input[name='key']", "value")
        .await
        .expect("the form's idempotency key");
    let dismiss_key = browser
        .attribute("#action-dismiss input[name='key']", "value")
        .await
        .unwrap();
    assert_ne!(key, dismiss_key, "each form its own key");

    // Accept, with a note and an actor.
    browser
        .type_into("#action-accept textarea[name='note']", HOSTILE_NOTE)
        .await;
    browser
        .type_into("#action-accept input[name='actor']", "ana")
        .await;
    browser.click("#action-accept button[type='submit']").await;
    browser
        .wait_for_url("the case after the action", |u| u.contains("?done="))
        .await;
    let result = browser.text("#result").await;
    assert!(result.contains("Done: accept by ana"), "{result}");
    assert!(result.contains("resolved"), "{result}");
    // The actor is what the person typed; the token is who it provably
    // was (issue 38, found 6): both are shown.
    assert!(
        result.contains("with the token support-1"),
        "the token's name beside the typed actor: {result}"
    );
    let audit = browser.text("#audit").await;
    assert!(
        audit.contains(HOSTILE_NOTE),
        "the note shown as text: {audit}"
    );
    assert!(
        audit.contains("support") && audit.contains("ana"),
        "{audit}"
    );
    assert!(
        browser.text("#audit tbody tr td.token").await == "support-1",
        "the audit table names the token: {audit}"
    );
    let source = browser.source().await;
    assert!(
        !source.contains("<script>window.pwned"),
        "the note reached the page as markup"
    );
    assert_eq!(w.h.intent(id).await.status, Status::Resolved);
    assert_eq!(w.h.balance("acct-1").await, 10_000, "credited 100 USD");
    assert_eq!(w.audit_entries().await, 1);

    // The same form sent again (a double click, a resubmit) is done once.
    let session = format!(
        "paywatch_session={}",
        cookie["value"].as_str().expect("cookie value")
    );
    let again = w
        .post_action(
            id,
            &session,
            &[
                ("action", "accept"),
                ("key", &key),
                ("note", HOSTILE_NOTE),
                ("actor", "ana"),
            ],
            &[("origin", &w.base), ("sec-fetch-site", "same-origin")],
        )
        .await;
    assert_eq!(again.status(), StatusCode::SEE_OTHER);
    let location = again.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(
        location.starts_with(&format!("/console/cases/{id}?replayed=")),
        "{location}"
    );
    browser.goto(&w.url(&location)).await;
    assert!(browser
        .text("#result")
        .await
        .contains("nothing was done again"));
    assert_eq!(w.h.balance("acct-1").await, 10_000, "credited once");
    assert_eq!(w.audit_entries().await, 1);

    // A fresh form to accept again is refused with the API's message.
    browser.goto(&w.url(&format!("/console/cases/{id}"))).await;
    browser
        .type_into("#action-accept textarea[name='note']", "again")
        .await;
    browser
        .type_into("#action-accept input[name='actor']", "bo")
        .await;
    browser.click("#action-accept button[type='submit']").await;
    let error = browser.text("#error").await;
    assert!(error.contains("already paid"), "{error}");
    assert!(error.contains("nothing was changed"), "{error}");
    assert_eq!(
        browser
            .attribute("#action-accept input[name='actor']", "value")
            .await
            .as_deref(),
        Some("bo"),
        "the refused form comes back filled in"
    );
    assert_eq!(w.h.balance("acct-1").await, 10_000);
    assert_eq!(w.audit_entries().await, 1);

    // Back to the queue: the case has left it.
    browser.click("header a[href='/console/queue']").await;
    browser
        .wait_for_url("the review queue", on_path("/console/queue"))
        .await;
    assert!(browser.text("#empty").await.contains("No case"));
    assert!(browser.find_all(&format!("#case-{id}")).await.is_empty());

    // Found by its transaction id, resolved.
    browser
        .goto(&w.url(&format!("/console/find?txid={txid}")))
        .await;
    let found = browser.text("#found").await;
    assert!(
        found.contains("resolved") && found.contains("late-topup"),
        "{found}"
    );

    // Watcher health.
    browser.goto(&w.url("/console/watchers")).await;
    let litecoin = browser.text("#watcher-litecoin").await;
    let tip = w.h.chain.height().to_string();
    assert!(litecoin.contains("running"), "{litecoin}");
    assert!(litecoin.contains(&tip), "tip {tip}: {litecoin}");
    // Its lag over the last hour, as a chart drawn from the samples the
    // watcher takes once a minute; one older than a day is pruned.
    let now = w.h.clock.now_ms();
    w.h.store
        .execute_raw(&format!(
            "INSERT INTO chain_samples (network, at, tip_height, cursor_height, final_height) \
             VALUES ('litecoin', {}, 100, 100, 99), ('litecoin', {}, 112, 100, 110), \
             ('litecoin', {}, 50, 40, 49)",
            now - 40 * 60_000,
            now - 20 * 60_000,
            now - 2 * 24 * 3_600_000,
        ))
        .await
        .unwrap();
    w.h.store
        .record_chain_sample(Network::Litecoin, now)
        .await
        .unwrap();
    let kept = w.h.store.chain_samples(Network::Litecoin, 0).await.unwrap();
    let lags: Vec<Option<u64>> = kept.iter().map(|p| p.lag_blocks()).collect();
    assert_eq!(lags, [Some(0), Some(12), Some(0)], "{kept:?}");
    browser.goto(&w.url("/console/watchers")).await;
    let chart = browser
        .attribute("#watcher-litecoin .lag-chart svg", "aria-label")
        .await;
    assert_eq!(
        chart.as_deref(),
        Some("litecoin lag in blocks: now 0, highest 12")
    );

    // An accepted gap is shown, its reason as text.
    w.h.store
        .execute_raw(
            "INSERT INTO chain_gaps (network, from_height, to_height, accepted_at, accepted_by, \
             reason) VALUES ('litecoin', 7, 9, 1000, 'ops-alice', '<b>pruned</b> past it')",
        )
        .await
        .unwrap();
    browser.goto(&w.url("/console/watchers")).await;
    let gaps = browser.text("#gaps").await;
    assert!(
        gaps.contains("7–9")
            && gaps.contains("ops-alice")
            && gaps.contains("<b>pruned</b> past it"),
        "{gaps}"
    );
    browser.quit().await;
}

async fn an_operator_sees_but_cannot_act_and_strangers_and_other_sites_are_refused(b: Backend) {
    let mut w = World::new(b).await;
    // The storefront's reference is shown as text, whatever it holds.
    let reference = "<i>late</i>-2";
    let (id, _) = w.paid_late(reference).await;
    let browser = Browser::start().await;

    // A wrong token: refused, and still not signed in.
    w.sign_in(&browser, "not-a-token").await;
    let error = browser.text("#error").await;
    assert!(error.contains("not configured"), "{error}");
    assert!(!browser.source().await.contains("not-a-token"));
    browser.goto(&w.url(&format!("/console/cases/{id}"))).await;
    browser
        .wait_for_url("the login page", on_path("/console/login"))
        .await;

    // The storefront's token does not open the console.
    w.sign_in(&browser, STOREFRONT).await;
    let error = browser.text("#error").await;
    assert!(error.contains("storefront"), "{error}");
    browser.goto(&w.url("/console/queue")).await;
    browser
        .wait_for_url("the login page", on_path("/console/login"))
        .await;

    // An operator sees the queue and the case, and no action form.
    w.sign_in(&browser, OPERATOR).await;
    browser
        .wait_for_url("the overview", on_path("/console/overview"))
        .await;
    browser.click("header a[href='/console/queue']").await;
    browser
        .wait_for_url("the review queue", on_path("/console/queue"))
        .await;
    assert_eq!(browser.text("#role").await, "operator");
    let row = browser.text(&format!("#case-{id}")).await;
    assert!(
        row.contains("paid_late") && row.contains(reference),
        "{row}"
    );
    assert!(browser.find_all(&format!("#case-{id} i")).await.is_empty());
    browser.click(&format!("#case-{id} a")).await;
    assert!(browser
        .text("#view-only")
        .await
        .contains("only a support token can act"));
    assert!(browser.find_all("form[id^='action-']").await.is_empty());

    // Posting anyway is refused, and writes nothing.
    let operator = w.session_cookie(OPERATOR).await;
    let accept = [
        ("action", "accept"),
        ("key", "k-operator-1"),
        ("note", "let me"),
        ("actor", "op"),
    ];
    let same_site = [
        ("origin", w.base.as_str()),
        ("sec-fetch-site", "same-origin"),
    ];
    let r = w.post_action(id, &operator, &accept, &same_site).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let page = r.text().await.unwrap();
    assert!(page.contains("the operator role may not"), "{page}");

    // Support's session, but the form came from another site: refused.
    let support = w.session_cookie(SUPPORT).await;
    for headers in [
        vec![("origin", "http://evil.example")],
        vec![
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://evil.example"),
        ],
        vec![("sec-fetch-site", "same-site")],
    ] {
        let r = w.post_action(id, &support, &accept, &headers).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{headers:?}");
        assert!(r.text().await.unwrap().contains("another site"));
    }
    let r = w
        .http
        .post(w.url("/console/login"))
        .header("origin", "http://evil.example")
        .form(&[("token", SUPPORT)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "a forged login");
    assert!(r.headers().get(SET_COOKIE).is_none());
    // A note is required, as in the API.
    let r = w
        .post_action(
            id,
            &support,
            &[
                ("action", "accept"),
                ("key", "k-2"),
                ("note", " "),
                ("actor", "bo"),
            ],
            &same_site,
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r
        .text()
        .await
        .unwrap()
        .contains("every action needs a note"));
    assert_eq!(w.audit_entries().await, 0);
    assert_eq!(w.h.intent(id).await.status, Status::NeedsReview);
    assert_eq!(w.h.balance("acct-1").await, 0);

    // Every console page: no framing, no caching, no script.
    let r = w
        .http
        .get(w.url("/console/queue"))
        .header("cookie", &operator)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(r.headers()["cache-control"], "no-store");

    // Logging out ends the session.
    browser.click("#logout").await;
    browser
        .wait_for_url("the login page", on_path("/console/login"))
        .await;
    browser.goto(&w.url("/console/watchers")).await;
    browser
        .wait_for_url("the login page", on_path("/console/login"))
        .await;
    browser.quit().await;
}
