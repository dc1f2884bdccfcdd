//! The knapsack for large clusters: a Lagrangian bound, reduced-cost fixing and a banded DP.
//!
//! Input: each job's kept options as `(extra GPUs e, extra value w)` over its smallest one (both
//! strictly rising), and the capacity `cap` left after every job's smallest option.
//!
//! 1. **Bound.** For a price λ ≥ 0 on GPUs, `h_i(λ) = max_j (w_ij − λ e_ij)` is job i's best
//!    priced value and `U = Σ h_i(λ) + λ·cap` bounds the optimum from above: any feasible choice
//!    has value `U − Σ r − λ·slack`, with reduced costs `r_ij = h_i(λ) − (w_ij − λ e_ij) ≥ 0` and
//!    slack ≥ 0 the GPUs it leaves idle. λ is the slope at which the greedy over the jobs'
//!    concave-hull segments (steepest first) runs out of GPUs, the LP relaxation's price, so `U`
//!    is the LP bound.
//! 2. **Incumbent.** The same greedy, skipping segments that do not fit, is a feasible choice of
//!    value `L`. A choice at least as good has `Σ r + λ·slack ≤ τ = U − L`.
//! 3. **Fixing.** So an option with `r > τ` is in no such choice: drop it. A job left with one
//!    option is fixed.
//! 4. **Banded DP.** The usual DP over GPU totals for the remaining jobs, where a state (jobs so
//!    far, GPUs so far) is dropped when a lower bound on `Σ r + λ·slack` of its completions (its
//!    own reduced cost, plus λ per GPU the jobs still to come cannot fill) exceeds τ: reduced
//!    costs only add up, so no completion of it beats the incumbent. What survives is a narrow
//!    band of totals around the LP's rather than the whole capacity, and the result is the exact
//!    optimum.
//!
//! Under a cell budget a band may be cut further, always keeping the incumbent's own state (so
//! the result never falls below it). Every state cut away has a bound ≥ θ on `Σ r + λ·slack`, so
//! every choice not searched has value ≤ `U − θ`, and `max(found, U − min(θ, τ))` is a certified
//! upper bound on the optimum.

/// A kept option: (index in the job's options, extra GPUs, extra value).
pub(super) type Kept = (usize, u32, f64);

/// One segment of a job's concave hull.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    /// Value per GPU along it.
    pub slope: f64,
    /// The job (its index where the hull was taken).
    pub job: u32,
    /// Positions (in the job's kept options) of the vertices this segment joins.
    pub from: u32,
    pub to: u32,
    /// GPUs it spans.
    pub gpus: u32,
}

/// A job with more than one option left after fixing.
#[derive(Debug, Clone)]
struct OpenJob {
    /// Its options in [`Lagrangian::open`].
    range: std::ops::Range<usize>,
    /// GPUs of its first option left; the DP counts GPUs beyond it.
    fewest: u32,
    job: usize,
    /// `h_i(λ)`, its best priced value.
    priced: f64,
    /// The incumbent's option, in GPUs beyond `fewest`.
    incumbent: u32,
    /// How far apart in GPUs its options of zero reduced cost lie. A job with a tie at the price
    /// widens the band at no cost, so such jobs go last, where the band has the fewest rows left.
    tie_spread: u32,
    /// GPUs between its first and last option left.
    spread: u32,
}

/// What the solve found: for each job the position of its choice among its kept options, the
/// total extra value, and a certified upper bound on the best total extra value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Outcome {
    pub choice: Vec<usize>,
    pub value: f64,
    pub bound: f64,
}

/// Reusable buffers.
#[derive(Debug, Default)]
pub(super) struct Lagrangian {
    segments: Vec<Segment>,
    hull: Vec<u32>,
    /// Options of the open jobs: `(position, GPUs beyond the job's fewest, value)`.
    open: Vec<(u32, u32, f64)>,
    open_jobs: Vec<OpenJob>,
    /// Band rows: the GPU total of each row's first state and the row's values. Row 0 is the
    /// empty prefix. Each row has its own allocation (kept for the next solve), so a growing band
    /// never copies or doubles what is stored before it.
    rows: Vec<(usize, Vec<f64>)>,
}

impl Lagrangian {
    /// Solves the kept-option problem with capacity `cap`, keeping at most about `cell_budget`
    /// DP states in all (exact whenever the bands fit).
    pub fn solve(&mut self, kept: &[Vec<Kept>], cap: usize, cell_budget: usize) -> Outcome {
        let (mut choice, price) = self.greedy(kept, cap);
        let incumbent: f64 = kept.iter().zip(&choice).map(|(k, &c)| k[c].2).sum();
        let best_priced = |options: &[Kept]| {
            options
                .iter()
                .map(|&(_, e, w)| w - price * f64::from(e))
                .fold(f64::NEG_INFINITY, f64::max)
        };
        let upper = kept.iter().map(|k| best_priced(k)).sum::<f64>() + price * cap as f64;
        let tau = (upper - incumbent).max(0.0);
        // Float sums of thousands of values carry rounding; keeping a few extra states is safe.
        let tolerance = 1e-9 * upper.abs().max(1.0);
        let keep_up_to = tau + tolerance;
        // Fixing: each job keeps the options of reduced cost ≤ τ.
        self.open.clear();
        self.open_jobs.clear();
        let (mut fixed_value, mut fixed_gpus, mut open_fewest) = (0.0, 0usize, 0usize);
        for (job, options) in kept.iter().enumerate() {
            let priced = best_priced(options);
            let start = self.open.len();
            let mut fewest = None;
            let mut ties: Option<(u32, u32)> = None;
            for (position, &(_, e, w)) in options.iter().enumerate() {
                let reduced = priced - (w - price * f64::from(e));
                // The incumbent's option has reduced cost ≤ τ; kept by name too, so that no
                // rounding can drop it.
                if reduced <= keep_up_to || position == choice[job] {
                    let lo = *fewest.get_or_insert(e);
                    self.open.push((position as u32, e - lo, w));
                    if reduced <= tolerance {
                        ties = Some(ties.map_or((e, e), |(first, _)| (first, e)));
                    }
                }
            }
            let fewest = fewest.expect("the incumbent's option is kept");
            if self.open.len() - start == 1 {
                // The incumbent's option is always left, so a lone survivor is the incumbent's.
                let (_, _, w) = self.open.pop().expect("one option left");
                fixed_value += w;
                fixed_gpus += fewest as usize;
                continue;
            }
            open_fewest += fewest as usize;
            let (tie_lo, tie_hi) = ties.unwrap_or((fewest, fewest));
            self.open_jobs.push(OpenJob {
                range: start..self.open.len(),
                fewest,
                job,
                priced,
                incumbent: options[choice[job]].1 - fewest,
                tie_spread: tie_hi - tie_lo,
                spread: self.open[self.open.len() - 1].1,
            });
        }
        self.open_jobs
            .sort_by_key(|o| (o.tie_spread, o.spread, o.job));
        // The incumbent fits and uses only options left, so this cannot underflow.
        let band_cap = cap - fixed_gpus - open_fewest;
        let (found, cut) = self.band_dp(price, band_cap, keep_up_to, cell_budget, &mut choice);
        let value = fixed_value + found;
        // Without a cut the search held every choice better than the incumbent: exact.
        let bound = cut.map_or(value, |theta| value.max(upper - theta.min(tau)));
        Outcome {
            choice,
            value,
            bound,
        }
    }

    /// The greedy over hull segments, steepest first: each job's position in its kept options,
    /// and the price, the slope of the first segment that did not fit (0 if all did).
    fn greedy(&mut self, kept: &[Vec<Kept>], cap: usize) -> (Vec<usize>, f64) {
        self.segments.clear();
        for (job, options) in kept.iter().enumerate() {
            push_hull(job as u32, options, &mut self.hull, &mut self.segments);
        }
        // Ties by job, then position: deterministic.
        self.segments.sort_unstable_by(|a, b| {
            b.slope
                .total_cmp(&a.slope)
                .then(a.job.cmp(&b.job))
                .then(a.to.cmp(&b.to))
        });
        let mut choice = vec![0usize; kept.len()];
        let mut blocked = vec![false; kept.len()];
        let mut used = 0usize;
        let mut price = None;
        for s in &self.segments {
            let job = s.job as usize;
            // A job whose segment was skipped takes none after it; rounding could also misorder
            // a job's own segments, so they are taken only in hull order.
            if blocked[job] || choice[job] != s.from as usize {
                continue;
            }
            if used + s.gpus as usize <= cap {
                used += s.gpus as usize;
                choice[job] = s.to as usize;
            } else {
                price.get_or_insert(s.slope);
                blocked[job] = true;
            }
        }
        (choice, price.unwrap_or(0.0))
    }

    /// The DP over the open jobs' options; writes their choices and returns their best total
    /// value and, when the budget cut a band, the smallest reduced cost of a state cut away.
    fn band_dp(
        &mut self,
        price: f64,
        band_cap: usize,
        keep_up_to: f64,
        cell_budget: usize,
        choice: &mut [usize],
    ) -> (f64, Option<f64>) {
        let rows_total = self.open_jobs.len();
        self.rows
            .resize_with(self.rows.len().max(rows_total + 1), Default::default);
        self.rows[0].0 = 0;
        self.rows[0].1.clear();
        self.rows[0].1.push(0.0);
        let mut cut: Option<f64> = None;
        let mut stored = 1usize;
        // Σ (h_i + λ·fewest_i) over the jobs so far: a state's reduced cost is this plus
        // λ·total minus its value.
        let mut priced = 0.0;
        // The incumbent's total so far, always kept.
        let mut along = 0usize;
        // The most GPUs the jobs still to come can add: a state further below the band's cap
        // leaves that much idle at least, which costs λ per GPU.
        let mut to_come: usize = self.open_jobs.iter().map(|o| o.spread as usize).sum();
        for (t, open) in self.open_jobs.iter().enumerate() {
            let options = &self.open[open.range.clone()];
            let (done, rest) = self.rows.split_at_mut(t + 1);
            let (a, prev) = (done[t].0, &done[t].1);
            let b = a + prev.len() - 1;
            let hi = (b + open.spread as usize).min(band_cap);
            let (first_total, row) = &mut rest[0];
            row.clear();
            row.resize(hi - a + 1, f64::NEG_INFINITY);
            for &(_, d, w) in options {
                let d = d as usize;
                if a + d > hi {
                    break;
                }
                let count = (b + d).min(hi) - (a + d) + 1;
                for (c, &p) in row[d..d + count].iter_mut().zip(&prev[..count]) {
                    let v = p + w;
                    // Not f64::max, whose NaN handling costs extra instructions in this loop
                    // (values are never NaN).
                    *c = if v > *c { v } else { *c };
                }
            }
            priced += open.priced + price * f64::from(open.fewest);
            along += open.incumbent as usize;
            to_come -= open.spread as usize;
            // A lower bound on Σ r + λ·slack of every completion of state k.
            let reduced = |k: usize, v: f64| {
                let idle = band_cap.saturating_sub(a + k + to_come);
                priced + price * (a + k + idle) as f64 - v
            };
            let live = |(k, &v): (usize, &f64)| (reduced(k, v) <= keep_up_to).then_some(k);
            let anchor = along - a;
            let first = row.iter().enumerate().find_map(live).unwrap_or(anchor);
            let last = row
                .iter()
                .enumerate()
                .rev()
                .find_map(live)
                .unwrap_or(anchor);
            debug_assert!(
                first <= anchor && anchor <= last,
                "the incumbent stays live"
            );
            let (mut first, mut last) = (first.min(anchor), last.max(anchor));
            // What is left of the budget, shared by the rows still to come.
            let allowance = (cell_budget.saturating_sub(stored) / (rows_total - t)).max(1);
            if last - first + 1 > allowance {
                let start = anchor.saturating_sub(allowance / 2).max(first);
                let end = (start + allowance - 1).min(last);
                let start = (end + 1).saturating_sub(allowance).max(first);
                let cheapest = (first..start)
                    .chain(end + 1..=last)
                    .map(|k| reduced(k, row[k]))
                    .fold(f64::INFINITY, f64::min);
                cut = Some(cut.map_or(cheapest, |c| c.min(cheapest)));
                (first, last) = (start, end);
            }
            row.truncate(last + 1);
            row.drain(..first);
            *first_total = a + first;
            stored += row.len();
        }
        // The best final state (the first on ties), then back through the rows: the first option
        // (fewest GPUs) that reproduces each state's value, bit for bit, as it was computed.
        let (last_a, last_row) = &self.rows[rows_total];
        let (k, best) =
            last_row
                .iter()
                .enumerate()
                .fold((0, f64::NEG_INFINITY), |(bk, bv), (k, &v)| {
                    if v > bv {
                        (k, v)
                    } else {
                        (bk, bv)
                    }
                });
        let mut total = last_a + k;
        for (t, open) in self.open_jobs.iter().enumerate().rev() {
            let (prev_a, prev) = &self.rows[t];
            let (cur_a, cur) = &self.rows[t + 1];
            let value = cur[total - cur_a];
            let &(position, d, _) = self.open[open.range.clone()]
                .iter()
                .find(|&&(_, d, w)| {
                    total
                        .checked_sub(d as usize + prev_a)
                        .and_then(|from| prev.get(from))
                        .is_some_and(|&p| p + w == value)
                })
                .expect("some option reproduces every state");
            choice[open.job] = position as usize;
            total -= d as usize;
        }
        (best, cut)
    }
}

/// Appends the segments of the upper concave hull of `options` (points `(extra GPUs, extra
/// value)` from `(0, 0)`, both rising) to `out`; `hull` is scratch space.
pub(super) fn push_hull(job: u32, options: &[Kept], hull: &mut Vec<u32>, out: &mut Vec<Segment>) {
    let point = |p: u32| {
        let (_, e, w) = options[p as usize];
        (f64::from(e), w)
    };
    // Monotone chain over positions.
    hull.clear();
    for p in 0..options.len() as u32 {
        while let [.., v0, v1] = hull[..] {
            let ((x0, y0), (x1, y1), (x2, y2)) = (point(v0), point(v1), point(p));
            // The middle vertex on or below the chord is no hull vertex.
            if (y1 - y0) * (x2 - x0) <= (y2 - y0) * (x1 - x0) {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(p);
    }
    for pair in hull.windows(2) {
        let ((x0, y0), (x1, y1)) = (point(pair[0]), point(pair[1]));
        out.push(Segment {
            slope: (y1 - y0) / (x1 - x0),
            job,
            from: pair[0],
            to: pair[1],
            gpus: (x1 - x0) as u32,
        });
    }
}
