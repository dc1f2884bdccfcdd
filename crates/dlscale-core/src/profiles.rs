//! Measured model profiles bundled into the binary, so dlscale runs without any data directory.
//!
//! Pollux's six models (T4 GPUs, 1–64 GPUs; `data/pollux/`, Apache-2.0) carry step times and
//! gradient statistics; Gavel's table (`data/gavel/`, MIT) is reachable as
//! `gavel:<gpu>:<model>`, e.g. `gavel:v100:ResNet-50` (throughput only).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::efficiency::EfficiencyModel;
use crate::error::{CoreError, Result};
use crate::throughput::{MeasuredTable, ThroughputModel};

/// A named model: how fast it steps, and how efficiently it learns per sample.
#[derive(Debug, Clone)]
pub struct ModelProfile {
    /// Name, as used in job files.
    pub name: String,
    /// Step-time model.
    pub throughput: Arc<dyn ThroughputModel>,
    /// Statistical efficiency over training, if measured.
    pub efficiency: Option<Arc<EfficiencyModel>>,
}

struct BundledFiles {
    name: &'static str,
    placements: &'static str,
    scalability: &'static str,
    validation: &'static [(u32, &'static str)],
}

macro_rules! pollux {
    ($name:literal, [$($batch:literal),*]) => {
        BundledFiles {
            name: $name,
            placements: include_str!(concat!("../data/pollux/", $name, "/placements.csv")),
            scalability: include_str!(concat!("../data/pollux/", $name, "/scalability.csv")),
            validation: &[$(($batch, include_str!(concat!("../data/pollux/", $name, "/validation-", stringify!($batch), ".csv")))),*],
        }
    };
}

const BUNDLED: [BundledFiles; 6] = [
    pollux!("bert", [12, 24, 48, 96, 192, 384]),
    pollux!("cifar10", [128, 256, 512, 1024, 2048, 4096]),
    pollux!("deepspeech2", [20, 40, 80, 160, 320, 640]),
    pollux!("imagenet", [200, 400, 800, 1600, 3200, 6400, 12800]),
    pollux!("ncf", [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]),
    pollux!("yolov3", [8, 16, 32, 64, 128, 256, 512]),
];

/// The raw files of a bundled Pollux profile (`data/pollux/<name>/`), for simulators that read
/// more of them than [`ModelProfile`] keeps (the `iteration` column, `sync_time`, exact shapes).
#[derive(Debug, Clone, Copy)]
pub struct PolluxFiles {
    /// `placements.csv`: `placement,local_bsz,step_time,sync_time`.
    pub placements: &'static str,
    /// Each `validation-<B>.csv` with its batch `B`, ascending.
    pub validation: &'static [(u32, &'static str)],
}

/// The raw files of bundled Pollux model `name`, if there is one.
pub fn pollux_files(name: &str) -> Option<PolluxFiles> {
    BUNDLED
        .iter()
        .find(|f| f.name == name)
        .map(|f| PolluxFiles {
            placements: f.placements,
            validation: f.validation,
        })
}

/// Step and sync times of Pollux's artifact simulator for placements over 5 or more nodes,
/// `model,nodes,replicas,local_bsz,step_time,sync_time`: the artifact's own point evaluations
/// of its interpolation (`data/pollux/artifact-large-placements.md` says how they were made).
pub const POLLUX_ARTIFACT_LARGE_PLACEMENTS: &str =
    include_str!("../data/pollux/artifact-large-placements.csv");

const GAVEL_CSV: &str = include_str!("../data/gavel/throughputs_isolated_flat.csv");

fn load(files: &BundledFiles) -> Result<ModelProfile> {
    let dir = format!("data/pollux/{}", files.name);
    let throughput = MeasuredTable::from_pollux_csv(
        files.placements.as_bytes(),
        &format!("{dir}/placements.csv"),
        files.scalability.as_bytes(),
        &format!("{dir}/scalability.csv"),
    )?;
    let validation = files
        .validation
        .iter()
        .map(|&(batch, text)| {
            (
                batch,
                text.as_bytes(),
                format!("{dir}/validation-{batch}.csv"),
            )
        })
        .collect();
    let efficiency = EfficiencyModel::from_pollux_csvs(validation)?;
    Ok(ModelProfile {
        name: files.name.to_string(),
        throughput: Arc::new(throughput),
        efficiency: Some(Arc::new(efficiency)),
    })
}

/// The bundled Pollux profiles, parsed once.
fn pollux_profiles() -> &'static BTreeMap<&'static str, ModelProfile> {
    static PROFILES: OnceLock<BTreeMap<&'static str, ModelProfile>> = OnceLock::new();
    PROFILES.get_or_init(|| {
        BUNDLED
            .iter()
            // The bundled files are fixed at compile time and covered by tests.
            .map(|files| (files.name, load(files).expect("bundled profile parses")))
            .collect()
    })
}

/// Names of the bundled Pollux models.
pub fn bundled_names() -> Vec<&'static str> {
    BUNDLED.iter().map(|f| f.name).collect()
}

/// Looks up a bundled model by name: a Pollux model (`imagenet`, ...) or `gavel:<gpu>:<model>`.
pub fn bundled(name: &str) -> Result<ModelProfile> {
    if let Some(profile) = pollux_profiles().get(name) {
        return Ok(profile.clone());
    }
    if let Some(rest) = name.strip_prefix("gavel:") {
        if let Some((gpu, model)) = rest.split_once(':') {
            let table = MeasuredTable::from_gavel_csv(
                GAVEL_CSV.as_bytes(),
                "data/gavel/throughputs_isolated_flat.csv",
                gpu,
                model,
            )?;
            return Ok(ModelProfile {
                name: name.to_string(),
                throughput: Arc::new(table),
                efficiency: None,
            });
        }
    }
    Err(CoreError::UnknownModel {
        name: name.to_string(),
        known: format!(
            "{}, gavel:<k80|p100|v100>:<ResNet-18|ResNet-50|Transformer|LM|Recommendation>",
            bundled_names().join(", ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::throughput_samples_per_s;

    #[test]
    fn every_bundled_profile_loads_and_scales() {
        for name in bundled_names() {
            let profile = bundled(name).unwrap();
            let model = profile.throughput.as_ref();
            let local = model.max_local_batch().unwrap();
            let one = throughput_samples_per_s(model, 1, 1, local).unwrap();
            let four = throughput_samples_per_s(model, 4, 1, 4 * local).unwrap();
            assert!(four > one, "{name}: 4 GPUs ({four}) should beat 1 ({one})");
            assert_eq!(model.max_gpus(), Some(64), "{name}");
            assert!(throughput_samples_per_s(model, 65, 17, 65 * local).is_none());
            let eff = profile.efficiency.unwrap();
            assert!(eff.epochs() >= 2 && eff.total_progress() > 0.0, "{name}");
        }
    }

    #[test]
    fn imagenet_matches_the_measurement() {
        // placements.csv: "1,200,..." is the 1-GPU step at local batch 200.
        let model = bundled("imagenet").unwrap().throughput;
        let step = model.step_time_s(1, 1, 200).unwrap();
        let line = include_str!("../data/pollux/imagenet/placements.csv")
            .lines()
            .find(|l| l.starts_with("1,200,"))
            .unwrap();
        let measured: f64 = line.split(',').nth(2).unwrap().parse().unwrap();
        assert!((step - measured).abs() < 1e-12);
        assert_eq!(model.max_local_batch(), Some(200));
    }

    #[test]
    fn gavel_models_and_unknown_names() {
        let resnet = bundled("gavel:v100:ResNet-50").unwrap();
        // Gavel: 4.39 steps/s on 1 V100 at batch 64 → ≈ 281 samples/s.
        let x = throughput_samples_per_s(resnet.throughput.as_ref(), 1, 1, 64).unwrap();
        assert!((x - 281.0).abs() < 5.0, "{x}");
        let err = bundled("resnet9000").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown model 'resnet9000' (known: bert, cifar10"),
            "{err}"
        );
        assert!(bundled("gavel:v100:NoSuchNet").is_err());
    }
}
