//! `dlscale explain ID`: why a job has what the service's last decision gave it, in plain words
//! (`GET /v1/jobs/{id}/explain`), with the numbers behind it.

use anyhow::Result;
use clap::Args;
use dlscale_autoscaler::explain::{Alternative, Explanation};
use dlscale_server::api::dto::ExplainView;
use dlscale_server::client::{segment, ApiClient, Method};

use crate::input_error;
use crate::service::{classify, local_time, runtime, Format};

/// `dlscale explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Job id.
    pub id: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
}

/// `dlscale explain`.
pub fn run_explain(args: &ExplainArgs) -> Result<()> {
    let client = ApiClient::from_env().map_err(input_error)?;
    let path = format!("/v1/jobs/{}/explain", segment(&args.id));
    let view: ExplainView = runtime()?
        .block_on(client.call(Method::GET, &path, None))
        .map_err(classify)?;
    if args.format == Format::Json {
        println!("{}", serde_json::to_string_pretty(&view)?);
        return Ok(());
    }
    println!("{}: {}", view.id, view.summary);
    if let Some(e) = &view.explanation {
        print!("{}", details(e, view.decided_at));
    }
    Ok(())
}

/// The numbers behind an explanation, one per line.
fn details(e: &Explanation, decided_at: Option<f64>) -> String {
    let mut out = String::new();
    if let Some(at) = decided_at {
        out += &format!("  decided:      {}\n", local_time(at));
    }
    if let Some(v) = e.value {
        out += &format!(
            "  value:        {v:.3} ({}, batch {})\n",
            gpus(e.gpus),
            e.batch_size
        );
    }
    if let Some(m) = &e.more {
        out += &format!("  more GPUs:    {}\n", alternative(m));
    }
    if let Some(f) = &e.fewer {
        out += &format!("  fewer GPUs:   {}\n", alternative(f));
    }
    if let Some(d) = &e.donor {
        out += &format!(
            "  would lose:   {} ({} → {}, value {:+.3})\n",
            d.id,
            d.gpus,
            gpus(d.to_gpus),
            d.value_change
        );
    }
    out += &format!("  free GPUs:    {}\n", e.free_gpus);
    out
}

fn alternative(a: &Alternative) -> String {
    let gain = a
        .gain
        .map_or(String::new(), |g| format!(", {:+.1} %", g * 100.0));
    format!(
        "{}, batch {}: {:.0} samples/s{gain} (value {:+.3})",
        gpus(a.gpus),
        a.batch_size,
        a.samples_per_s,
        a.value_change
    )
}

/// `1 GPU`, `4 GPUs`.
fn gpus(n: u32) -> String {
    if n == 1 {
        "1 GPU".to_string()
    } else {
        format!("{n} GPUs")
    }
}
