//! How an allocation's running time is cut into usage records: pure
//! arithmetic on whole Unix seconds, so it can be checked by hand.

/// One usage record's span, `[start, end)` in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: i64,
    pub end: i64,
    /// Seconds of the span on or after the allocation went down.
    pub excluded: i64,
}

/// The spans from `from` up to `until`, cut at multiples of `interval`
/// seconds since the epoch (a divisor of 3600, so no span crosses an hour).
/// A running allocation (`closing` false) is metered only in whole grid
/// steps, so the same call later cuts the same spans; a released one is
/// metered to its end. `down_from` starts the excluded time.
pub fn spans(
    from: i64,
    until: i64,
    interval: i64,
    down_from: Option<i64>,
    closing: bool,
) -> Vec<Span> {
    let until = if closing {
        until
    } else {
        until.div_euclid(interval) * interval
    };
    let mut spans = Vec::new();
    let mut start = from;
    while start < until {
        let end = ((start.div_euclid(interval) + 1) * interval).min(until);
        let excluded = down_from.map_or(0, |down| (end - down.max(start)).clamp(0, end - start));
        spans.push(Span {
            start,
            end,
            excluded,
        });
        start = end;
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: i64, end: i64, excluded: i64) -> Span {
        Span {
            start,
            end,
            excluded,
        }
    }

    #[test]
    fn a_running_allocation_is_cut_on_the_grid_and_waits_for_whole_steps() {
        // Began at 125 with a 60-second grid; it is now 250.
        assert_eq!(
            spans(125, 250, 60, None, false),
            vec![span(125, 180, 0), span(180, 240, 0)]
        );
        // Metering again from where it stopped cuts nothing new before 300.
        assert!(spans(240, 299, 60, None, false).is_empty());
        assert_eq!(spans(240, 300, 60, None, false), vec![span(240, 300, 0)]);
    }

    #[test]
    fn a_released_allocation_is_metered_to_its_last_second() {
        assert_eq!(spans(240, 275, 60, None, true), vec![span(240, 275, 0)]);
        assert!(spans(275, 275, 60, None, true).is_empty());
    }

    #[test]
    fn time_after_a_fault_is_excluded_and_no_span_crosses_an_hour() {
        // Down from 3,590 to its release at 3,725, on an hourly grid.
        assert_eq!(
            spans(3_000, 3_725, 3_600, Some(3_590), true),
            vec![span(3_000, 3_600, 10), span(3_600, 3_725, 125)]
        );
        // A fault before the span excludes all of it.
        assert_eq!(
            spans(100, 160, 60, Some(50), true),
            vec![span(100, 120, 20), span(120, 160, 40)]
        );
    }

    #[test]
    fn spans_add_up_to_the_whole_time() {
        let all = spans(7, 10_007, 60, Some(9_000), true);
        assert_eq!(all.iter().map(|s| s.end - s.start).sum::<i64>(), 10_000);
        assert_eq!(all.iter().map(|s| s.excluded).sum::<i64>(), 1_007);
        assert!(all.windows(2).all(|w| w[0].end == w[1].start));
    }
}
