//! `dlscale explain ID`: why a job has what the service's last decision gave it, in plain words
//! (`GET /v1/jobs/{id}/explain`), with the numbers behind it.

use anyhow::Result;
use clap::Args;
use dlscale_autoscaler::explain::{Alternative, Explanation, TypeChoice, TypeOption, TypeReason};
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
    if let Some(t) = &e.types {
        out += &types(t);
    }
    out
}

/// Where it runs among the GPU types, the types it is limited to, and its best on each other
/// type, one per line.
fn types(t: &TypeChoice) -> String {
    let mut out = String::new();
    if let (Some(here), Some(progress)) = (&t.gpu_type, t.progress_samples_per_s) {
        out += &format!("  GPU type:     {here} ({progress:.0} samples/s of progress)\n");
    }
    if let Some(only) = &t.only_on {
        out += &format!("  may run on:   {} only\n", only.join(", "));
    }
    for o in &t.others {
        let reason = match &o.reason {
            TypeReason::NoFaster => "no faster".to_string(),
            TypeReason::Held => "held where it runs".to_string(),
            TypeReason::MoveCost { .. } => "too little gain for a move".to_string(),
            TypeReason::Taken => "not enough free".to_string(),
            TypeReason::Policy { policy } => format!("policy {policy}"),
        };
        out += &format!(
            "  {:<14}{}, {} free: {reason}\n",
            format!("on {}:", o.gpu_type),
            type_option(&o.best),
            o.free_gpus
        );
        if let Some(w) = &o.within_free {
            out += &format!("    within free: {}\n", type_option(w));
        }
    }
    out
}

fn type_option(o: &TypeOption) -> String {
    format!(
        "{}, batch {}: {:.0} samples/s of progress (value {:+.3})",
        gpus(o.gpus),
        o.batch_size,
        o.progress_samples_per_s,
        o.value_change
    )
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

#[cfg(test)]
mod tests {
    use dlscale_autoscaler::explain::{
        Explanation, Limit, OnOtherType, TypeChoice, TypeOption, TypeReason,
    };
    use dlscale_core::JobState;

    fn explanation(types: Option<TypeChoice>) -> Explanation {
        Explanation {
            id: "x".into(),
            at_s: 0.0,
            state: Some(JobState::Running),
            gpus: 2,
            batch_size: 240,
            value: Some(2000.0),
            free_gpus: 0,
            more: None,
            fewer: None,
            donor: None,
            limit: Limit::Largest { cap: None },
            types,
        }
    }

    #[test]
    fn on_a_fleet_the_details_name_the_type_and_each_other_ones_best() {
        let plain = super::details(&explanation(None), None);
        assert!(!plain.contains("GPU type"), "{plain}");
        let t4 = TypeOption {
            gpus: 8,
            batch_size: 240,
            samples_per_s: 1600.0,
            progress_samples_per_s: 1600.0,
            value_change: -400.0,
        };
        let typed = super::details(
            &explanation(Some(TypeChoice {
                gpu_type: Some("a100".into()),
                only_on: Some(vec!["t4".into(), "a100".into()]),
                progress_samples_per_s: Some(2000.0),
                others: vec![OnOtherType {
                    gpu_type: "t4".into(),
                    best: t4,
                    within_free: None,
                    free_gpus: 8,
                    reason: TypeReason::NoFaster,
                }],
            })),
            None,
        );
        assert!(
            typed.ends_with(
                "  free GPUs:    0\n  GPU type:     a100 (2000 samples/s of progress)\n  \
                 may run on:   t4, a100 only\n  on t4:        8 GPUs, batch 240: 1600 samples/s \
                 of progress (value -400.000), 8 free: no faster\n"
            ),
            "{typed}"
        );
    }
}
