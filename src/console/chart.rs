//! Small charts drawn on the server as inline SVG: no script, no build
//! step, readable where the page is. Integer arithmetic only.

use super::html::Html;

const WIDTH: i64 = 240;
const HEIGHT: i64 = 40;
/// Room above and below the line, so a flat line at 0 or at the top shows.
const MARGIN: i64 = 2;

/// A line of `points` (time, value) between `from_ms` and `to_ms`, scaled
/// so the largest value touches the top; `what` names it for screen readers
/// and on hover, with the latest and the highest value.
pub(crate) fn sparkline(h: &mut Html, what: &str, from_ms: i64, to_ms: i64, points: &[(i64, u64)]) {
    let Some(&(_, latest)) = points.last() else {
        h.raw("<span class=\"muted\">no samples yet</span>");
        return;
    };
    let highest = points.iter().map(|(_, v)| *v).max().unwrap_or(0);
    let span = (to_ms - from_ms).max(1);
    let scale = u128::from(highest.max(1));
    let drawable = u128::try_from(HEIGHT - 2 * MARGIN).unwrap_or(1);
    let at = |t: i64, v: u64| {
        let x = (t - from_ms).clamp(0, span) * WIDTH / span;
        let up = i64::try_from(u128::from(v) * drawable / scale).unwrap_or(0);
        (x, HEIGHT - MARGIN - up)
    };
    let line: Vec<String> = points
        .iter()
        .map(|(t, v)| {
            let (x, y) = at(*t, *v);
            format!("{x},{y}")
        })
        .collect();
    let (last_x, last_y) = at(points[points.len() - 1].0, latest);
    let label = format!("{what}: now {latest}, highest {highest}");
    h.raw("<svg class=\"spark\" viewBox=\"0 0 240 40\" width=\"240\" height=\"40\" role=\"img\" aria-label=\"")
        .text(&label)
        .raw("\"><title>")
        .text(&label)
        .raw("</title><polyline fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\" points=\"")
        .text(line.join(" "))
        .raw("\"/><circle r=\"2\" fill=\"currentColor\" cx=\"")
        .text(last_x)
        .raw("\" cy=\"")
        .text(last_y)
        .raw("\"/></svg>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_spans_the_hour_and_its_highest_value_touches_the_top() {
        let mut h = Html::new();
        sparkline(
            &mut h,
            "bitcoin lag",
            0,
            3_600_000,
            &[(0, 0), (1_800_000, 6), (3_600_000, 3)],
        );
        let svg = h.as_str();
        assert!(svg.contains("points=\"0,38 120,2 240,20\""), "{svg}");
        assert!(
            svg.contains("aria-label=\"bitcoin lag: now 3, highest 6\""),
            "{svg}"
        );
        assert!(svg.contains("cx=\"240\" cy=\"20\""), "{svg}");
    }

    #[test]
    fn no_samples_say_so_rather_than_draw_a_flat_line() {
        let mut h = Html::new();
        sparkline(&mut h, "lag", 0, 1, &[]);
        assert_eq!(h.as_str(), "<span class=\"muted\">no samples yet</span>");
    }

    #[test]
    fn huge_values_and_points_outside_the_window_stay_inside_the_box() {
        let mut h = Html::new();
        sparkline(&mut h, "lag", 1_000, 2_000, &[(0, u64::MAX), (5_000, 1)]);
        assert!(
            h.as_str().contains("points=\"0,2 240,38\""),
            "{}",
            h.as_str()
        );
    }
}
