//! Throughput from measured step-time tables (Pollux's profiles, Gavel's table, ElasticFlow's
//! A100 tables).
//!
//! # Interpolation, and where it stops
//!
//! Measurements are grouped by placement shape `(nodes, gpus)`; each shape holds a curve of step
//! time over the per-GPU batch. A query `(gpus, nodes, local_batch)` is answered by:
//!
//! 1. **Per-GPU batch, within a shape:** piecewise-linear between measured batches. Below the
//!    smallest measured batch the step time of the smallest is used (a smaller batch is never
//!    slower, so this is conservative). Above the largest measured batch of that shape, but within
//!    the model's memory limit (the largest per-GPU batch measured in *any* shape), the last
//!    segment is extended linearly (compute grows linearly in the batch). Beyond the memory limit
//!    the configuration is infeasible.
//! 2. **GPU count, within a node count:** piecewise-linear between the two nearest measured GPU
//!    counts for that node count. No extrapolation outside the measured GPU range of that node count.
//! 3. **Node count:** piecewise-linear between the nearest node counts below and above whose
//!    measured GPU range covers the query; if only one side covers it, that side's value is used.
//!    If neither does, the configuration is infeasible (`None`): a GPU count beyond every
//!    measurement is never extrapolated.

use std::collections::BTreeMap;
use std::io::Read;

use serde::Deserialize;

use super::ThroughputModel;
use crate::error::{CoreError, Result};
use crate::GpuCount;

/// Step time over the per-GPU batch for one placement shape.
#[derive(Debug, Clone, PartialEq)]
struct Curve {
    local_batch: Vec<f64>,
    step_time_s: Vec<f64>,
}

impl Curve {
    fn eval(&self, local_batch: f64, memory_limit: f64) -> Option<f64> {
        if local_batch > memory_limit {
            return None;
        }
        let xs = &self.local_batch;
        let ys = &self.step_time_s;
        let last = xs.len() - 1;
        if local_batch <= xs[0] {
            return Some(ys[0]);
        }
        if local_batch >= xs[last] {
            if last == 0 {
                // One measurement: scale proportionally, the pessimistic reading.
                return Some(ys[0] * local_batch / xs[0]);
            }
            let slope = ((ys[last] - ys[last - 1]) / (xs[last] - xs[last - 1])).max(0.0);
            return Some(ys[last] + slope * (local_batch - xs[last]));
        }
        let i = xs.partition_point(|&x| x <= local_batch);
        Some(lerp(xs[i - 1], ys[i - 1], xs[i], ys[i], local_batch))
    }
}

fn lerp(x0: f64, y0: f64, x1: f64, y1: f64, x: f64) -> f64 {
    if x1 == x0 {
        return y0;
    }
    y0 + (y1 - y0) * (x - x0) / (x1 - x0)
}

/// One measured step time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TablePoint {
    /// Nodes spanned.
    pub nodes: u32,
    /// GPUs used.
    pub gpus: GpuCount,
    /// Samples per GPU.
    pub local_batch: u32,
    /// Seconds per step.
    pub step_time_s: f64,
}

/// A throughput model read from measured step times; see the module docs for interpolation.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredTable {
    /// Node count → shapes with that node count, sorted by GPU count.
    by_nodes: BTreeMap<u32, Vec<(GpuCount, Curve)>>,
    memory_limit: u32,
    max_gpus: GpuCount,
}

impl MeasuredTable {
    /// Builds a table from points; duplicate `(nodes, gpus, local_batch)` points are averaged
    /// (several placements with the same shape, e.g. `13` and `22`, both 4 GPUs on 2 nodes).
    pub fn from_points(points: &[TablePoint]) -> Result<Self> {
        if points.is_empty() {
            return Err(CoreError::Model(
                "a measured table needs at least one point".into(),
            ));
        }
        let mut grouped: BTreeMap<(u32, GpuCount), BTreeMap<u32, (f64, u32)>> = BTreeMap::new();
        for p in points {
            let slot = grouped
                .entry((p.nodes, p.gpus))
                .or_default()
                .entry(p.local_batch)
                .or_insert((0.0, 0));
            slot.0 += p.step_time_s;
            slot.1 += 1;
        }
        let mut by_nodes: BTreeMap<u32, Vec<(GpuCount, Curve)>> = BTreeMap::new();
        for ((nodes, gpus), batches) in grouped {
            let curve = Curve {
                local_batch: batches.keys().map(|&b| f64::from(b)).collect(),
                step_time_s: batches
                    .values()
                    .map(|&(sum, n)| sum / f64::from(n))
                    .collect(),
            };
            by_nodes.entry(nodes).or_default().push((gpus, curve));
        }
        let memory_limit = points.iter().map(|p| p.local_batch).max().unwrap_or(1);
        let max_gpus = points.iter().map(|p| p.gpus).max().unwrap_or(1);
        Ok(MeasuredTable {
            by_nodes,
            memory_limit,
            max_gpus,
        })
    }

    /// Reads Pollux's `placements.csv` (`placement,local_bsz,step_time,sync_time`) and
    /// `scalability.csv` (`num_nodes,num_replicas,local_bsz,step_time,sync_time`).
    pub fn from_pollux_csv(
        placements: impl Read,
        placements_name: &str,
        scalability: impl Read,
        scalability_name: &str,
    ) -> Result<Self> {
        #[derive(Deserialize)]
        struct PlacementRow {
            placement: String,
            local_bsz: u32,
            step_time: f64,
        }
        #[derive(Deserialize)]
        struct ScalabilityRow {
            num_nodes: u32,
            num_replicas: u32,
            local_bsz: u32,
            step_time: f64,
        }
        let mut points = Vec::new();
        for (line, row) in read_csv::<PlacementRow>(placements, placements_name)? {
            let digits: Option<Vec<u32>> = row.placement.chars().map(|c| c.to_digit(10)).collect();
            let digits = digits
                .filter(|d| !d.is_empty() && d.iter().all(|&x| x > 0))
                .ok_or_else(|| {
                    CoreError::parse(
                        placements_name,
                        line,
                        format!(
                            "placement '{}' is not a string of digits 1-9",
                            row.placement
                        ),
                    )
                })?;
            let gpus = digits.iter().sum();
            points.push(checked_point(
                placements_name,
                line,
                digits.len() as u32,
                gpus,
                row.local_bsz,
                row.step_time,
            )?);
        }
        for (line, row) in read_csv::<ScalabilityRow>(scalability, scalability_name)? {
            points.push(checked_point(
                scalability_name,
                line,
                row.num_nodes,
                row.num_replicas,
                row.local_bsz,
                row.step_time,
            )?);
        }
        MeasuredTable::from_points(&points)
    }

    /// Reads one of ElasticFlow's strong-scaling tables (`global_batch_size,1,2,4,…,64`: per
    /// global batch, optimizer steps per second on each GPU count), measured on nodes of
    /// `gpus_per_node` GPUs: a GPU count is placed on the fewest nodes, at a per-GPU batch of
    /// the global batch over the GPUs (a count that does not divide its batch, and an empty,
    /// zero or `nan` cell, are not measurements).
    pub fn from_elasticflow_csv(
        csv: impl Read,
        name: &str,
        gpus_per_node: GpuCount,
    ) -> Result<Self> {
        let mut points = Vec::new();
        for (line, row) in read_csv::<BTreeMap<String, String>>(csv, name)? {
            let batch: u32 = row
                .get("global_batch_size")
                .and_then(|b| b.parse().ok())
                .ok_or_else(|| {
                    CoreError::parse(name, line, "global_batch_size must be a whole number")
                })?;
            for (column, cell) in &row {
                let Ok(gpus) = column.parse::<GpuCount>() else {
                    continue; // the batch column
                };
                let steps_per_s: f64 = match cell.as_str() {
                    "" | "nan" => continue,
                    text => text.parse().map_err(|_| {
                        CoreError::parse(
                            name,
                            line,
                            format!("column {column}: {text:?} is not a number"),
                        )
                    })?,
                };
                if steps_per_s == 0.0 || gpus == 0 || !batch.is_multiple_of(gpus) {
                    continue;
                }
                points.push(checked_point(
                    name,
                    line,
                    gpus.div_ceil(gpus_per_node.max(1)),
                    gpus,
                    batch / gpus,
                    1.0 / steps_per_s,
                )?);
            }
        }
        MeasuredTable::from_points(&points)
    }

    /// Reads one model of Gavel's flattened table (`worker_type,job_type,model,
    /// per_worker_batch_size,num_gpus,steps_per_sec_simulation,steps_per_sec_physical_cluster`)
    /// for a GPU type such as `v100`. Consolidated rows are one node; the `_unconsolidated` worker
    /// type is one GPU per node. Gavel sums steps over workers, so one step takes
    /// `num_gpus / steps_per_sec` seconds; a rate of 0 is a configuration that did not run.
    pub fn from_gavel_csv(
        csv: impl Read,
        name: &str,
        worker_type: &str,
        model: &str,
    ) -> Result<Self> {
        #[derive(Deserialize)]
        struct GavelRow {
            worker_type: String,
            model: String,
            per_worker_batch_size: Option<u32>,
            num_gpus: u32,
            steps_per_sec_simulation: f64,
        }
        let spread = format!("{worker_type}_unconsolidated");
        let mut points = Vec::new();
        for (line, row) in read_csv::<GavelRow>(csv, name)? {
            if row.model != model || (row.worker_type != worker_type && row.worker_type != spread) {
                continue;
            }
            let Some(local_batch) = row.per_worker_batch_size else {
                continue;
            };
            if row.steps_per_sec_simulation == 0.0 {
                continue; // Gavel's record of a configuration that did not run (memory)
            }
            if row.steps_per_sec_simulation < 0.0 {
                return Err(CoreError::parse(
                    name,
                    line,
                    "steps_per_sec_simulation must not be negative",
                ));
            }
            let nodes = if row.worker_type == spread {
                row.num_gpus
            } else {
                1
            };
            let step = f64::from(row.num_gpus) / row.steps_per_sec_simulation;
            points.push(checked_point(
                name,
                line,
                nodes,
                row.num_gpus,
                local_batch,
                step,
            )?);
        }
        if points.is_empty() {
            return Err(CoreError::Model(format!(
                "{name}: no rows with a batch size for model '{model}' on worker type '{worker_type}'"
            )));
        }
        MeasuredTable::from_points(&points)
    }

    fn at_nodes(
        shapes: &[(GpuCount, Curve)],
        gpus: GpuCount,
        local_batch: f64,
        limit: f64,
    ) -> Option<f64> {
        let i = shapes.partition_point(|(g, _)| *g < gpus);
        let (g_hi, c_hi) = shapes.get(i)?;
        if *g_hi == gpus {
            return c_hi.eval(local_batch, limit);
        }
        let (g_lo, c_lo) = shapes.get(i.checked_sub(1)?)?;
        let y_lo = c_lo.eval(local_batch, limit)?;
        let y_hi = c_hi.eval(local_batch, limit)?;
        Some(lerp(
            f64::from(*g_lo),
            y_lo,
            f64::from(*g_hi),
            y_hi,
            f64::from(gpus),
        ))
    }
}

impl MeasuredTable {
    /// The step time at `gpus` where no node count's shapes bracket it: a table measured by
    /// whole nodes (8 GPUs on one node, 16 on two, as ElasticFlow's) has no 12 at any node
    /// count. Interpolated between the nearest GPU counts measured below and above it at any
    /// node count (of each, the shape whose node count is nearest `nodes`); `None` outside the
    /// GPU counts measured.
    fn across_node_counts(
        &self,
        gpus: GpuCount,
        nodes: u32,
        local_batch: f64,
        limit: f64,
    ) -> Option<f64> {
        // (GPUs, distance in nodes, step time) of the nearest measured shape on each side.
        let mut lo: Option<(GpuCount, u32, f64)> = None;
        let mut hi: Option<(GpuCount, u32, f64)> = None;
        for (&n, shapes) in &self.by_nodes {
            for (g, curve) in shapes {
                let Some(y) = curve.eval(local_batch, limit) else {
                    continue;
                };
                let candidate = (*g, n.abs_diff(nodes), y);
                if *g <= gpus && lo.is_none_or(|(lg, ld, _)| (*g, ld) > (lg, candidate.1)) {
                    lo = Some(candidate);
                }
                if *g >= gpus && hi.is_none_or(|(hg, hd, _)| (hg, candidate.1) > (*g, hd)) {
                    hi = Some(candidate);
                }
            }
        }
        let ((g0, _, y0), (g1, _, y1)) = (lo?, hi?);
        Some(lerp(f64::from(g0), y0, f64::from(g1), y1, f64::from(gpus)))
    }
}

impl ThroughputModel for MeasuredTable {
    fn step_time_s(&self, gpus: GpuCount, nodes: u32, local_batch: u32) -> Option<f64> {
        if gpus == 0 || local_batch == 0 || gpus > self.max_gpus {
            return None;
        }
        let nodes = nodes.clamp(1, gpus);
        let limit = f64::from(self.memory_limit);
        let l = f64::from(local_batch);
        let below = self
            .by_nodes
            .range(..=nodes)
            .rev()
            .find_map(|(&n, shapes)| Some((n, Self::at_nodes(shapes, gpus, l, limit)?)));
        let above = self
            .by_nodes
            .range(nodes..)
            .find_map(|(&n, shapes)| Some((n, Self::at_nodes(shapes, gpus, l, limit)?)));
        match (below, above) {
            (Some((n0, y0)), Some((n1, y1))) => {
                Some(lerp(f64::from(n0), y0, f64::from(n1), y1, f64::from(nodes)))
            }
            (Some((_, y)), None) | (None, Some((_, y))) => Some(y),
            (None, None) => self.across_node_counts(gpus, nodes, l, limit),
        }
    }

    fn max_local_batch(&self) -> Option<u32> {
        Some(self.memory_limit)
    }

    fn max_gpus(&self) -> Option<GpuCount> {
        Some(self.max_gpus)
    }
}

fn checked_point(
    name: &str,
    line: u64,
    nodes: u32,
    gpus: GpuCount,
    local_batch: u32,
    step_time_s: f64,
) -> Result<TablePoint> {
    if nodes == 0 || gpus == 0 || nodes > gpus {
        return Err(CoreError::parse(
            name,
            line,
            format!("need 1 ≤ nodes ≤ gpus, got {nodes} nodes and {gpus} GPUs"),
        ));
    }
    if local_batch == 0 {
        return Err(CoreError::parse(
            name,
            line,
            "local batch must be at least 1",
        ));
    }
    if !step_time_s.is_finite() || step_time_s <= 0.0 {
        return Err(CoreError::parse(
            name,
            line,
            format!("step time must be positive, got {step_time_s}"),
        ));
    }
    Ok(TablePoint {
        nodes,
        gpus,
        local_batch,
        step_time_s,
    })
}

/// Reads every record of a headed CSV, each with its 1-based line number.
pub(crate) fn read_csv<T: serde::de::DeserializeOwned>(
    mut reader: impl Read,
    name: &str,
) -> Result<Vec<(u64, T)>> {
    let mut text = Vec::new();
    reader
        .read_to_end(&mut text)
        .map_err(|e| CoreError::parse(name, 0, e.to_string()))?;
    // Physical line of a byte offset: the csv crate's own line count skips blank lines.
    // Physical line of a record starting at a byte offset. The csv crate's own line count skips
    // blank lines, and a record's offset may sit on the blank lines before it: step over them.
    // Offsets only grow, so lines are counted incrementally from the previous record.
    let (mut counted_to, mut lines_before) = (0usize, 0u64);
    let mut line_at = |byte: u64| {
        let mut at = (byte as usize).min(text.len());
        while matches!(text.get(at), Some(b'\n' | b'\r')) {
            at += 1;
        }
        if at >= counted_to {
            lines_before += text[counted_to..at].iter().filter(|&&b| b == b'\n').count() as u64;
            counted_to = at;
        }
        1 + lines_before
    };
    let mut csv = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_slice());
    let headers = csv
        .headers()
        .map_err(|e| CoreError::parse(name, 1, csv_reason(&e)))?
        .clone();
    let mut rows = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match csv.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                let line = record.position().map_or(0, |p| line_at(p.byte()));
                let row = record
                    .deserialize(Some(&headers))
                    .map_err(|e| CoreError::parse(name, line, csv_reason(&e)))?;
                rows.push((line, row));
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| line_at(p.byte()));
                return Err(CoreError::parse(name, line, csv_reason(&e)));
            }
        }
    }
    Ok(rows)
}

fn csv_reason(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => match err.field() {
            Some(field) => format!("column {}: {}", field + 1, err.kind()),
            None => err.kind().to_string(),
        },
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> MeasuredTable {
        let mut points = Vec::new();
        for (nodes, gpus, sync) in [
            (1, 1, 0.0),
            (1, 2, 0.1),
            (1, 4, 0.2),
            (2, 4, 0.4),
            (2, 8, 0.6),
        ] {
            for local_batch in [10, 20] {
                points.push(TablePoint {
                    nodes,
                    gpus,
                    local_batch,
                    step_time_s: 0.01 * f64::from(local_batch) + sync,
                });
            }
        }
        MeasuredTable::from_points(&points).unwrap()
    }

    #[test]
    fn exact_points_are_reproduced() {
        let t = table();
        assert!((t.step_time_s(4, 2, 20).unwrap() - 0.6).abs() < 1e-12);
        assert!((t.step_time_s(1, 1, 10).unwrap() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn a_gpu_count_no_node_count_brackets_lies_between_the_nearest_measured() {
        // Measured by whole nodes, as ElasticFlow's tables are: 1, 2 and 4 GPUs on one node,
        // 8 on two. No node count has a shape on each side of 6.
        let mut points = Vec::new();
        for (nodes, gpus, sync) in [(1, 1, 0.0), (1, 2, 0.1), (1, 4, 0.2), (2, 8, 0.6)] {
            for local_batch in [10, 20] {
                points.push(TablePoint {
                    nodes,
                    gpus,
                    local_batch,
                    step_time_s: 0.01 * f64::from(local_batch) + sync,
                });
            }
        }
        let t = MeasuredTable::from_points(&points).unwrap();
        let (at4, at8) = (
            t.step_time_s(4, 1, 10).unwrap(),
            t.step_time_s(8, 2, 10).unwrap(),
        );
        for (gpus, nodes) in [(6, 1), (6, 2), (5, 2), (7, 3)] {
            let expect = lerp(4.0, at4, 8.0, at8, f64::from(gpus));
            let got = t.step_time_s(gpus, nodes, 10);
            assert!(
                got.is_some_and(|y| (y - expect).abs() < 1e-12),
                "{gpus} on {nodes}: {got:?}"
            );
        }
        // Beyond the most GPUs measured, or past memory: still none.
        assert_eq!(t.step_time_s(9, 2, 10), None);
        assert_eq!(t.step_time_s(6, 2, 1000), None);
    }

    #[test]
    fn interpolates_batch_gpus_and_nodes() {
        let t = table();
        assert!((t.step_time_s(1, 1, 15).unwrap() - 0.15).abs() < 1e-12);
        assert!((t.step_time_s(3, 1, 10).unwrap() - (0.1 + 0.15)).abs() < 1e-12);
        assert!((t.step_time_s(6, 2, 10).unwrap() - (0.1 + 0.5)).abs() < 1e-12);
    }

    #[test]
    fn clamps_small_batches_extends_large_and_refuses_beyond_memory() {
        let t = table();
        assert_eq!(t.step_time_s(1, 1, 5), t.step_time_s(1, 1, 10));
        assert!(t.step_time_s(1, 1, 21).is_none(), "20 is the memory limit");
        assert!(
            t.step_time_s(16, 4, 10).is_none(),
            "no extrapolation beyond 8 GPUs"
        );
    }

    #[test]
    fn malformed_rows_name_the_line() {
        let placements = "placement,local_bsz,step_time,sync_time\n1,32,0.1,0.0\n1x,32,0.2,0.0\n";
        let scal = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n";
        let err = MeasuredTable::from_pollux_csv(
            placements.as_bytes(),
            "p.csv",
            scal.as_bytes(),
            "s.csv",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "p.csv:3: placement '1x' is not a string of digits 1-9"
        );
        let placements =
            "placement,local_bsz,step_time,sync_time\n\n1,32,0.1,0.0\n\n1,abc,0.1,0.0\n";
        let err = MeasuredTable::from_pollux_csv(
            placements.as_bytes(),
            "p.csv",
            scal.as_bytes(),
            "s.csv",
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("p.csv:5: column 2"), "{err}");
    }
}
