//! Decision time and memory of the elastic-batch optimizer from 64 × 256 to 10,000 × 65,536
//! (jobs × GPUs), analytic and measured profiles, speedup and fair utilities: a CSV and two
//! charts (`optimizer-time`, `optimizer-memory`, SVG and PNG) in the folder given (default
//! `docs`). Single-threaded.
//!
//! Time is the median of repeated whole decisions (value tables, admission, knapsack; at least
//! 5 runs and 2 s per point). Memory is the peak of heap bytes allocated during one decision
//! beyond what was allocated before it (the jobs themselves), counted by a wrapping allocator.
//!
//! `cargo run --release -p dlscale-sim --example optimizer_scaling -- docs`

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlscale_core::synthetic::KINDS;
use dlscale_core::{build_policy, Cluster, DecisionRequest, Settings, Utility};
use dlscale_sim::plot::{line_chart, Axis, Chart, Series};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const SIZES: [(usize, u32); 5] = [
    (64, 256),
    (256, 1024),
    (1000, 4096),
    (4000, 16384),
    (10_000, 65_536),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args().nth(1).unwrap_or_else(|| "docs".into());
    let out = Path::new(&out);
    std::fs::create_dir_all(out)?;
    let mut csv = String::from("kind,utility,jobs,gpus,median_ms,peak_heap_mb,solver,gap\n");
    let (mut time, mut memory) = (Vec::new(), Vec::new());
    for (kind, generate) in KINDS {
        for utility in [Utility::Speedup, Utility::Fair { p: -1.0 }] {
            let label = format!("{kind}, {utility}");
            let (mut times, mut peaks) = (Vec::new(), Vec::new());
            for (jobs, gpus) in SIZES {
                let cluster = Cluster::new(gpus / 8, 8)?;
                let instance = generate(jobs, 64, 42);
                let settings = Settings {
                    utility,
                    ..Settings::default()
                };
                // A fresh policy per decision: nothing kept from an earlier one.
                let decide = || {
                    build_policy("elastic-batch", &Default::default())
                        .expect("a registered policy")
                        .decide(&DecisionRequest::new(&cluster, &instance, &settings))
                };
                let before = LIVE.load(Ordering::Relaxed);
                PEAK.store(before, Ordering::Relaxed);
                let decision = decide();
                let peak_mb = (PEAK.load(Ordering::Relaxed) - before) as f64 / 1e6;
                let mut runs = Vec::new();
                let start = Instant::now();
                while runs.len() < 5 || start.elapsed() < Duration::from_secs(2) {
                    let t = Instant::now();
                    std::hint::black_box(decide());
                    runs.push(t.elapsed().as_secs_f64() * 1e3);
                }
                runs.sort_by(f64::total_cmp);
                let median_ms = runs[runs.len() / 2];
                let solver = decision.solver.name();
                println!(
                    "{label:<22} {jobs:>6} x {gpus:>6}: {median_ms:>9.3} ms  {peak_mb:>8.2} MB  {solver} gap {:.1e}",
                    decision.gap
                );
                csv += &format!(
                    "{kind},{utility},{jobs},{gpus},{median_ms:.4},{peak_mb:.3},{solver},{:e}\n",
                    decision.gap
                );
                let x = (jobs as f64 * f64::from(gpus)).log10();
                times.push((x, median_ms.log10()));
                peaks.push((x, peak_mb.log10()));
            }
            time.push(Series {
                label: label.clone(),
                points: times,
            });
            memory.push(Series {
                label,
                points: peaks,
            });
        }
    }
    std::fs::write(out.join("optimizer-scaling.csv"), csv)?;
    let x_label = "log10(jobs × GPUs): 64×256 … 10,000×65,536";
    line_chart(
        &out.join("optimizer-time"),
        &Chart {
            title: "Elastic-batch decision time (median, one core)",
            x_label,
            y_label: "log10(ms)",
            x_axis: Axis::Linear,
            series: &time,
            markers: true,
        },
    )?;
    line_chart(
        &out.join("optimizer-memory"),
        &Chart {
            title: "Elastic-batch decision memory (peak heap)",
            x_label,
            y_label: "log10(MB)",
            x_axis: Axis::Linear,
            series: &memory,
            markers: true,
        },
    )?;
    Ok(())
}
