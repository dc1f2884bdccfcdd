//! Numbers in words for the reports: separators, units, signed changes, ranges.

/// `x` rounded to a whole number with thousands separators ("12,947"; "−47").
pub(super) fn int(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    // The same rounding as the tables' `{:.0}`.
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 && digits != "0" {
        format!("−{out}")
    } else {
        out
    }
}

/// Items in prose: "3", "2 and 5", "2, 4 and 5" (empty: "").
pub(super) fn and_list<T: std::fmt::Display>(items: &[T]) -> String {
    let names: Vec<String> = items.iter().map(T::to_string).collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Seconds: "3,417 s".
pub(super) fn secs(x: f64) -> String {
    format!("{} s", int(x))
}

/// A percentage's magnitude: one decimal below 10 %, none above ("2.7 %", "62 %").
pub(super) fn pct(p: f64) -> String {
    let p = p.abs();
    if p < 9.95 {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

/// A ratio: "1.24×".
pub(super) fn times(r: f64) -> String {
    format!("{r:.2}×")
}

/// How `a` compares with `b`, the direction from the sign: "24 % higher than", "12 % lower
/// than", "the same as" (within 0.05 %).
pub(super) fn compared(a: f64, b: f64) -> String {
    let p = (a / b - 1.0) * 100.0;
    if pct(p) == "0.0 %" {
        "the same as".to_string()
    } else if p > 0.0 {
        format!("{} higher than", pct(p))
    } else {
        format!("{} lower than", pct(p))
    }
}

/// The range of ratios: "2.21–2.43×" (one value: "2.43×").
pub(super) fn range_x(values: &[f64]) -> String {
    let (lo, hi) = min_max(values);
    if times(lo) == times(hi) {
        times(lo)
    } else {
        format!("{lo:.2}–{}", times(hi))
    }
}

pub(super) fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        })
}
