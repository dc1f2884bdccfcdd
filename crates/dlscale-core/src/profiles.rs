//! Measured model profiles bundled into the binary, so dlscale runs without any data directory.
//!
//! Pollux's six models (T4 GPUs, 1–64 GPUs; `data/pollux/`, Apache-2.0) carry step times and
//! gradient statistics; Gavel's table (`data/gavel/`, MIT) is reachable as
//! `gavel:<gpu>:<model>`, e.g. `gavel:v100:ResNet-50` (throughput only).
//!
//! **Across GPU types** ([`bundled_on_types`]), each of Pollux's models has a table on every
//! type of [`BUNDLED_TYPES`]: measured where a source measured that model there (T4: Pollux's
//! profiles; K80, P100, V100: Gavel's ResNet-50 for `imagenet` and ResNet-18 for `cifar10`, 1–8
//! GPUs; A100: ElasticFlow's ResNet-50, BERT and DeepSpeech2, 1–64 GPUs on 8-GPU nodes,
//! `data/elasticflow/`, Apache-2.0), else derived: its T4 table sped up by the type's speed
//! over T4, the geometric mean over the models measured on both of their one-GPU throughput
//! ratio at the largest per-GPU batch both fit ([`Provenance`]).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use crate::efficiency::EfficiencyModel;
use crate::error::{CoreError, Result};
use crate::throughput::{
    throughput_samples_per_s, Extended, MeasuredTable, Scaled, ThroughputModel,
};

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

/// The GPU types every bundled Pollux model has a table on ([`bundled_on_types`]).
pub const BUNDLED_TYPES: [&str; 5] = ["t4", "k80", "p100", "v100", "a100"];

/// The type Pollux's profiles were measured on, from which the other types are derived.
const PROFILED_TYPE: &str = "t4";

/// Models measured on a type besides T4: (type, Pollux model, the source's file or model).
const MEASURED_ELSEWHERE: [(&str, &str, &str); 9] = [
    ("k80", "imagenet", "ResNet-50"),
    ("k80", "cifar10", "ResNet-18"),
    ("p100", "imagenet", "ResNet-50"),
    ("p100", "cifar10", "ResNet-18"),
    ("v100", "imagenet", "ResNet-50"),
    ("v100", "cifar10", "ResNet-18"),
    ("a100", "imagenet", "resnet50"),
    ("a100", "bert", "bert"),
    ("a100", "deepspeech2", "deepspeech2"),
];

const ELASTICFLOW_A100: [(&str, &str); 3] = [
    (
        "resnet50",
        include_str!("../data/elasticflow/a100/resnet50.csv"),
    ),
    ("bert", include_str!("../data/elasticflow/a100/bert.csv")),
    (
        "deepspeech2",
        include_str!("../data/elasticflow/a100/deepspeech2.csv"),
    ),
];

/// Where a bundled model's table on a GPU type comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Provenance {
    /// Measured on that type.
    Measured,
    /// Its T4 table with every step time divided by `speedup`, the type's speed over T4.
    Derived {
        /// The type's speed over T4.
        speedup: f64,
    },
}

/// A bundled model on one GPU type.
#[derive(Debug, Clone)]
pub struct TypedProfile {
    /// The type ([`BUNDLED_TYPES`]).
    pub gpu_type: &'static str,
    /// Its step times there.
    pub throughput: Arc<dyn ThroughputModel>,
    /// Measured or derived.
    pub provenance: Provenance,
}

/// A GPU type and a Pollux model.
type TypeAndModel = (&'static str, &'static str);

/// The table of Pollux model `model` measured on `gpu_type` by another source, if one did.
fn measured_elsewhere(gpu_type: &str, model: &str) -> Option<Arc<dyn ThroughputModel>> {
    static TABLES: OnceLock<BTreeMap<TypeAndModel, Arc<dyn ThroughputModel>>> = OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        MEASURED_ELSEWHERE
            .iter()
            .map(|&(gpu_type, model, source)| {
                let table = if gpu_type == "a100" {
                    let (file, text) = ELASTICFLOW_A100
                        .iter()
                        .find(|(file, _)| *file == source)
                        .expect("every A100 source is bundled");
                    MeasuredTable::from_elasticflow_csv(
                        text.as_bytes(),
                        &format!("data/elasticflow/a100/{file}.csv"),
                        8,
                    )
                } else {
                    MeasuredTable::from_gavel_csv(
                        GAVEL_CSV.as_bytes(),
                        "data/gavel/throughputs_isolated_flat.csv",
                        gpu_type,
                        source,
                    )
                };
                // The bundled files are fixed at compile time and covered by tests.
                let table: Arc<dyn ThroughputModel> =
                    Arc::new(table.expect("bundled table parses"));
                ((gpu_type, model), table)
            })
            .collect()
    });
    tables.get(&(gpu_type, model)).cloned()
}

/// How much faster `gpu_type` runs than T4 (1 for T4): the geometric mean, over the models
/// measured on both, of their one-GPU throughput ratio at the largest per-GPU batch both tables
/// fit. `None` for a type the bundled tables do not cover. Worked out once per type.
pub fn speedup_over_t4(gpu_type: &str) -> Option<f64> {
    static SPEEDUPS: OnceLock<BTreeMap<&'static str, f64>> = OnceLock::new();
    SPEEDUPS
        .get_or_init(|| {
            BUNDLED_TYPES
                .iter()
                .filter_map(|&t| Some((t, measured_speedup_over_t4(t)?)))
                .collect()
        })
        .get(gpu_type)
        .copied()
}

/// [`speedup_over_t4`], worked out from the tables.
fn measured_speedup_over_t4(gpu_type: &str) -> Option<f64> {
    if gpu_type == "t4" {
        return Some(1.0);
    }
    let ratios: Vec<f64> = MEASURED_ELSEWHERE
        .iter()
        .filter(|(t, _, _)| *t == gpu_type)
        .filter_map(|&(_, model, _)| {
            let there = measured_elsewhere(gpu_type, model)?;
            let t4 = &pollux_profiles().get(model)?.throughput;
            let batch = there.max_local_batch()?.min(t4.max_local_batch()?);
            let fast = throughput_samples_per_s(there.as_ref(), 1, 1, batch)?;
            let slow = throughput_samples_per_s(t4.as_ref(), 1, 1, batch)?;
            Some(fast / slow)
        })
        .collect();
    (!ratios.is_empty())
        .then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
}

/// Bundled Pollux model `name` on every type of [`BUNDLED_TYPES`], measured or derived (built
/// once: every job of a model shares its tables).
pub fn bundled_on_types(name: &str) -> Result<Vec<TypedProfile>> {
    static TYPED: OnceLock<BTreeMap<&'static str, Vec<TypedProfile>>> = OnceLock::new();
    let typed = TYPED.get_or_init(|| {
        bundled_names()
            .into_iter()
            .map(|name| (name, on_types(name)))
            .collect()
    });
    typed
        .get(name)
        .cloned()
        .ok_or_else(|| CoreError::UnknownModel {
            name: name.to_string(),
            known: bundled_names().join(", "),
        })
}

/// Bundled Pollux model `name` on `gpu_type`, if both are bundled.
pub fn bundled_on_type(name: &str, gpu_type: &str) -> Option<TypedProfile> {
    if !BUNDLED_TYPES.contains(&gpu_type) {
        return None; // without loading the tables
    }
    bundled_on_types(name)
        .ok()?
        .into_iter()
        .find(|typed| typed.gpu_type == gpu_type)
}

/// Bundled Pollux model `name` on every bundled type.
fn on_types(name: &str) -> Vec<TypedProfile> {
    let t4 = &pollux_profiles()[name];
    BUNDLED_TYPES
        .iter()
        .map(|&gpu_type| {
            if gpu_type == PROFILED_TYPE {
                return TypedProfile {
                    gpu_type,
                    throughput: t4.throughput.clone(),
                    provenance: Provenance::Measured,
                };
            }
            let speedup = speedup_over_t4(gpu_type)
                .expect("every bundled type has a model measured on it and on T4");
            let derived: Arc<dyn ThroughputModel> =
                Arc::new(Scaled::new(t4.throughput.clone(), speedup));
            match measured_elsewhere(gpu_type, name) {
                // Beyond the GPUs it was measured on, it scales as derived.
                Some(measured) => TypedProfile {
                    gpu_type,
                    throughput: Extended::wrap(measured, derived),
                    provenance: Provenance::Measured,
                },
                None => TypedProfile {
                    gpu_type,
                    throughput: derived,
                    provenance: Provenance::Derived { speedup },
                },
            }
        })
        .collect()
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

    #[test]
    fn every_bundled_model_runs_on_every_bundled_type() {
        for &(gpu_type, _, _) in &MEASURED_ELSEWHERE {
            let speedup = speedup_over_t4(gpu_type).unwrap();
            assert!(speedup.is_finite() && speedup > 0.0, "{gpu_type}");
        }
        // Newer types are faster, as every source measured.
        let speed = |t: &str| speedup_over_t4(t).unwrap();
        assert!(speed("a100") > speed("v100") && speed("v100") > speed("k80"));
        for name in bundled_names() {
            let on = bundled_on_types(name).unwrap();
            assert_eq!(on.len(), BUNDLED_TYPES.len(), "{name}");
            for typed in on {
                let model = typed.throughput.as_ref();
                let local = model.max_local_batch().unwrap();
                let one = throughput_samples_per_s(model, 1, 1, local);
                assert!(one.is_some_and(|x| x > 0.0), "{name} on {}", typed.gpu_type);
                // Every type runs as far as T4's table (a table measured on fewer GPUs goes on
                // as the derived one scales).
                assert_eq!(model.max_gpus(), Some(64), "{name} on {}", typed.gpu_type);
                let wide = throughput_samples_per_s(model, 32, 8, 32 * local);
                assert!(
                    wide.is_some_and(|x| x > 0.0),
                    "{name} on {}",
                    typed.gpu_type
                );
                let measured = MEASURED_ELSEWHERE
                    .iter()
                    .any(|&(t, m, _)| t == typed.gpu_type && m == name)
                    || typed.gpu_type == PROFILED_TYPE;
                assert_eq!(
                    typed.provenance == Provenance::Measured,
                    measured,
                    "{name} on {}",
                    typed.gpu_type
                );
            }
        }
        assert!(bundled_on_types("gavel:v100:ResNet-50").is_err());
    }

    #[test]
    fn elasticflow_tables_read_as_measured() {
        // resnet50.csv: global batch 256 on 8 GPUs, 10.378702644353233 steps/s.
        let table = measured_elsewhere("a100", "imagenet").unwrap();
        let step = table.step_time_s(8, 1, 32).unwrap();
        assert!((step - 1.0 / 10.378702644353233).abs() < 1e-12, "{step}");
        assert_eq!(
            (table.max_gpus(), table.max_local_batch()),
            (Some(64), Some(256))
        );
        let bad = "global_batch_size,1,2\n64,3.5,x\n";
        let error = MeasuredTable::from_elasticflow_csv(bad.as_bytes(), "t.csv", 8)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("t.csv:2") && error.contains("column 2"),
            "{error}"
        );
    }
}
