//! Cutting planes (Kelley's method) over prices per GPU type: the minimum of a convex,
//! piecewise-linear bound `U(λ)` of which each point gives its value and a subgradient. The
//! knapsacks across types price their types' GPUs and minimise such a bound; moving one price
//! at a time stalls at a kink of `U` (each price alone raises it, some together lower it),
//! which the planes do not. Each point's plane lies below `U`; the least of the planes' upper
//! envelope, a small LP over the prices (microlp), is the next point, until it is within a
//! tolerance of the best value found (so `U`'s minimum is too) or after a number of points.

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
};

/// The gap (relative to the bound, at least 1) from which a knapsack across types goes on from
/// its own price search with cutting planes; closer, its prices stand (the planes, and the plans
/// they make it try, cost more than the little they could gain).
pub(super) const GO_ON_FROM: f64 = 1e-5;

/// How close (relative to the best value found, at least 1) the planes' least must come to it
/// for the search to stop.
pub(super) const TOLERANCE: f64 = 1e-9;

/// A point of `U`: its value and a subgradient there, one slope per price.
pub(super) struct Point {
    /// `U` at the point.
    pub value: f64,
    /// A subgradient of `U` there.
    pub slope: Vec<f64>,
}

/// The least value of `U` found from `start` (prices, each within `[0, ceiling[t]]`, where
/// `U`'s minimum must lie), and its prices: `evaluate` gives each point (`None`: stop); at
/// most `points` are evaluated, and the search stops when the planes' least is within
/// `tolerance` (relative to the best value, at least 1) of the best value found. `start`
/// itself is the first point: the result is never worse than it.
pub(super) fn minimise(
    start: &[f64],
    ceiling: &[f64],
    points: usize,
    tolerance: f64,
    mut evaluate: impl FnMut(&[f64]) -> Option<Point>,
) -> Option<(f64, Vec<f64>)> {
    let mut best: Option<(f64, Vec<f64>)> = None;
    let mut planes: Vec<(Point, Vec<f64>)> = Vec::new();
    let mut at = start.to_vec();
    for _ in 0..points {
        let Some(point) = evaluate(&at) else {
            break;
        };
        if best.as_ref().is_none_or(|(value, _)| point.value < *value) {
            best = Some((point.value, at.clone()));
        }
        planes.push((point, at));
        let mut vars = ProblemVariables::new();
        let lowest = vars.add(variable());
        let prices: Vec<Variable> = ceiling
            .iter()
            .map(|&c| vars.add(variable().min(0.0).max(c)))
            .collect();
        let mut lp = vars.minimise(lowest).using(microlp);
        for (point, at) in &planes {
            let mut plane = Expression::from(point.value);
            for ((&p, &s), &a) in prices.iter().zip(&point.slope).zip(at) {
                plane += s * (p - a);
            }
            lp = lp.with(constraint!(lowest >= plane));
        }
        let Ok(solved) = lp.solve() else {
            break;
        };
        let found = best.as_ref().map_or(f64::INFINITY, |(value, _)| *value);
        if found - solved.value(lowest) <= tolerance * found.abs().max(1.0) {
            break;
        }
        at = prices.iter().map(|&p| solved.value(p)).collect();
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The largest of `planes` (a constant and two slopes each) at `at`, with its slopes.
    fn largest_of(planes: &[(f64, [f64; 2])], at: &[f64]) -> Point {
        let (value, slope) = planes
            .iter()
            .map(|(c, s)| (c + s[0] * at[0] + s[1] * at[1], s.to_vec()))
            .fold((f64::NEG_INFINITY, vec![0.0; 2]), |best, p| {
                if p.0 > best.0 {
                    p
                } else {
                    best
                }
            });
        Point { value, slope }
    }

    #[test]
    fn the_planes_find_a_minimum_that_one_price_at_a_time_stalls_before() {
        // |λ₀ − λ₁| + 2·|λ₀ + λ₁ − 2|: from (0, 2), moving λ₀ alone or λ₁ alone raises it (a
        // kink along λ₀ + λ₁ = 2 and one along λ₀ = λ₁); its minimum, 0, is at (1, 1).
        let planes = [
            (4.0, [-1.0, -3.0]),
            (4.0, [-3.0, -1.0]),
            (-4.0, [3.0, 1.0]),
            (-4.0, [1.0, 3.0]),
        ];
        let start = [0.0, 2.0];
        let at_start = largest_of(&planes, &start).value;
        for step in [-0.1, 0.1] {
            for t in 0..2 {
                let mut moved = start;
                moved[t] = (moved[t] + step).max(0.0);
                assert!(largest_of(&planes, &moved).value >= at_start, "{moved:?}");
            }
        }
        let (value, prices) = minimise(&start, &[10.0, 10.0], 50, 1e-12, |at| {
            Some(largest_of(&planes, at))
        })
        .unwrap();
        assert!(
            value.abs() < 1e-9 && at_start > 1.0,
            "{value} at {prices:?}"
        );
        assert!((prices[0] - 1.0).abs() < 1e-9 && (prices[1] - 1.0).abs() < 1e-9);
    }
}
