//! Markup built in Rust, with one way in for a dynamic value: escaped.
//!
//! [`Html::raw`] takes only `&'static str`, so markup can come from this
//! crate's source alone; anything read from a request, the database or a
//! chain goes through [`Html::text`], which escapes it. A value cannot reach
//! a page unescaped without a change here.

use std::fmt::Display;

use axum::http::StatusCode;
use axum::response::{Html as HtmlBody, IntoResponse, Response};

use crate::api::{ApiError, Role};

/// Text made safe for an element's content and a double- or single-quoted
/// attribute value alike.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A fragment of a page.
#[derive(Debug, Default)]
pub(crate) struct Html(String);

impl Html {
    pub(crate) fn new() -> Html {
        Html::default()
    }

    /// Markup from this crate's source.
    pub(crate) fn raw(&mut self, markup: &'static str) -> &mut Html {
        self.0.push_str(markup);
        self
    }

    /// Any value, escaped.
    pub(crate) fn text(&mut self, value: impl Display) -> &mut Html {
        self.0.push_str(&escape(&value.to_string()));
        self
    }

    /// A fragment built the same way.
    pub(crate) fn append(&mut self, other: &Html) -> &mut Html {
        self.0.push_str(&other.0);
        self
    }

    /// `<td>value</td>` for each value.
    pub(crate) fn cells(&mut self, values: &[&dyn Display]) -> &mut Html {
        for v in values {
            self.raw("<td>").text(v).raw("</td>");
        }
        self
    }

    /// A labelled row of a two-column table.
    pub(crate) fn field(&mut self, label: &'static str, value: impl Display) -> &mut Html {
        self.raw("<tr><th>")
            .raw(label)
            .raw("</th><td>")
            .text(value)
            .raw("</td></tr>")
    }

    /// The markup, for a page served outside the console.
    pub(crate) fn into_string(self) -> String {
        self.0
    }

    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// An optional value, or a dash for none.
pub(crate) fn or_dash<T: Display>(v: Option<T>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| v.to_string())
}

const STYLE: &str = "<style>\
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#111;background:#fafafa}\
header{background:#1d2b3a;color:#fff;padding:.5em 1em;display:flex;gap:1.5em;align-items:center}\
header a{color:#fff}header form{margin:0 0 0 auto}\
main{padding:1em;max-width:90em}\
table{border-collapse:collapse;margin:.5em 0 1.5em;background:#fff}\
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}\
th{background:#eef1f4}\
td{overflow-wrap:anywhere}\
.banner{padding:.6em 1em;margin:0 0 1em;border:1px solid}\
.ok{background:#e6f4ea;border-color:#2e7d32}.err{background:#fdecea;border-color:#c62828}\
.actions{display:flex;flex-wrap:wrap;gap:1em}\
.actions form{border:1px solid #ccc;background:#fff;padding:.6em;width:20em}\
.actions label{display:block;margin:.3em 0}\
.actions input,.actions textarea{width:100%;box-sizing:border-box}\
.muted{color:#666}.spark{color:#1d5fa8;display:block}p .spark{display:inline-block;vertical-align:middle}\
</style>";

/// A whole page: the navigation for a signed-in `who`, then `body`.
pub(crate) fn page(status: StatusCode, title: &str, who: Option<Role>, body: &Html) -> Response {
    let mut h = Html::new();
    h.raw("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width\"><title>")
        .text(title)
        .raw(" · paywatch console</title>")
        .raw(STYLE)
        .raw("</head><body><header><strong>paywatch console</strong>");
    if let Some(role) = who {
        h.raw("<a href=\"/console/overview\">Overview</a>")
            .raw("<a href=\"/console/queue\">Review queue</a>")
            .raw("<a href=\"/console/find\">Find</a>")
            .raw("<a href=\"/console/watchers\">Watchers</a>")
            .raw("<form method=\"post\" action=\"/console/logout\"><span id=\"role\">")
            .text(role.as_str())
            .raw("</span> <button type=\"submit\" id=\"logout\">Log out</button></form>");
    }
    h.raw("</header><main><h1>")
        .text(title)
        .raw("</h1>")
        .append(body)
        .raw("</main></body></html>");
    (status, HtmlBody(h.0)).into_response()
}

/// A banner with the API's message for a refused or failed request.
pub(crate) fn error_banner(h: &mut Html, e: &ApiError) {
    h.raw("<p class=\"banner err\" id=\"error\" role=\"alert\"><strong>")
        .text(e.code)
        .raw(":</strong> ")
        .text(&e.message)
        .raw("</p>");
}

/// A page that only says what went wrong, with the API's status and message.
pub(crate) fn error_page(e: &ApiError, who: Option<Role>) -> Response {
    let mut h = Html::new();
    error_banner(&mut h, e);
    let title = e.status.canonical_reason().unwrap_or("Error");
    page(e.status, title, who, &h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_value_is_text_never_markup() {
        let hostile = "<script>alert(\"x\")</script> & 'quoted' \"double\"";
        assert_eq!(
            escape(hostile),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;quoted&#39; &quot;double&quot;"
        );
        let mut h = Html::new();
        h.raw("<td title=\"").text(hostile).raw("\">").text(hostile);
        h.cells(&[&hostile]).field("note", hostile);
        assert!(!h.as_str().contains("<script"), "{}", h.as_str());
        // The attribute cannot be closed early by the value.
        assert_eq!(h.as_str().matches('"').count(), 2, "{}", h.as_str());
        assert_eq!(escape("plain text 0.5 LTC"), "plain text 0.5 LTC");
        assert_eq!(or_dash(None::<i64>), "—");
        assert_eq!(or_dash(Some(7)), "7");
    }
}
