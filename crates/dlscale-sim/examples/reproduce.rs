//! Runs both reproductions into a directory: `cargo run --release -p dlscale-sim --example
//! reproduce -- OUT_DIR [paper|pollux|both]`.

use std::path::PathBuf;

use dlscale_sim::{reproduce_paper, reproduce_pollux, PaperOptions, PolluxOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = PathBuf::from(args.next().unwrap_or_else(|| "reproduce-out".into()));
    let which = args.next().unwrap_or_else(|| "both".into());
    if which == "pollux" || which == "both" {
        let rows = reproduce_pollux(
            &out.join("pollux"),
            &PolluxOptions::default(),
            &mut |_, _| {},
        )?;
        for r in &rows {
            println!("{:<60} {:>6.0} s", r.label, r.mean_avg_jct_s());
        }
    }
    if which == "paper" || which == "both" {
        let points = reproduce_paper(&out.join("paper"), &PaperOptions::default(), &mut |_, _| {})?;
        for p in &points {
            let (eb, eg) = (&p.summaries[0], &p.summaries[1]);
            println!(
                "rate {:>5}/h: completed eb {} eg {} st {}  dropped eb {} eg {}  avg JCT eb {:.0} eg {:.0} st {:.0}",
                p.rate_per_h,
                eb.completed,
                eg.completed,
                p.summaries[2].completed,
                eb.dropped,
                eg.dropped,
                eb.avg_jct_s,
                eg.avg_jct_s,
                p.summaries[2].avg_jct_s
            );
        }
    }
    println!("reports in {}", out.display());
    Ok(())
}
