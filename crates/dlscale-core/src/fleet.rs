//! A fleet of GPU types: nodes carry one type each (a name, GPUs per node, memory per GPU), and a
//! job runs on one type at a time. Each type is a pool of identical nodes, a [`Cluster`] of its
//! own, whose GPUs are a capacity of their own in the knapsack across types
//! ([`crate::allocator::typed`]). One pool is today's homogeneous cluster ([`Fleet::uniform`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::error::{CoreError, Result};
use crate::placement::{Node, Topology};
use crate::GpuCount;

/// The nodes of one GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuPool {
    /// The type's name, as jobs, profiles and Slurm's typed GRES name it (`a100`, `t4`).
    pub name: Arc<str>,
    /// Number of nodes of this type.
    pub nodes: u32,
    /// GPUs on each of them.
    pub gpus_per_node: GpuCount,
    /// Memory of one GPU, GiB: a description of the type; what bounds a job's per-GPU batch
    /// on it is the job's own limit there (`types` in a job file, or its bundled table's).
    pub memory_gib: f64,
}

impl GpuPool {
    /// The pool as a homogeneous cluster.
    pub fn cluster(&self) -> Cluster {
        Cluster {
            nodes: self.nodes,
            gpus_per_node: self.gpus_per_node,
        }
    }

    /// Its GPUs.
    pub fn gpus(&self) -> GpuCount {
        self.nodes * self.gpus_per_node
    }
}

/// The name of the one type of a fleet made from a plain cluster ([`Fleet::uniform`]).
pub const UNTYPED: &str = "gpu";

/// Whether `name` can name a GPU type: lower-case letters, digits, `-`, `_` and `.`, starting
/// with a letter (as Slurm's GRES types are written).
pub fn is_type_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.".contains(c))
}

/// The GPU types of a cluster, each a pool of identical nodes, checked. As a file:
/// `{"types": [{"name": "a100", "nodes": 2, "gpus_per_node": 8, "memory_gib": 80}, …]}`, or
/// `[[types]]` tables in TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "FleetFields")]
pub struct Fleet {
    #[serde(rename = "types")]
    pools: Vec<GpuPool>,
    /// Each type's GPUs: its nodes times their GPUs for a fleet as written; what its nodes
    /// offer for one read off a topology ([`Fleet::of_topology`]), whose nodes may differ.
    #[serde(skip)]
    capacities: Vec<GpuCount>,
}

/// A fleet as written, before its checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFields {
    types: Vec<GpuPool>,
}

impl TryFrom<FleetFields> for Fleet {
    type Error = CoreError;
    fn try_from(fields: FleetFields) -> Result<Fleet> {
        Fleet::new(fields.types)
    }
}

/// The most GPU types a fleet may have: the typed optimizer keeps a capacity per type, and real
/// fleets mix a handful of generations.
pub const MAX_GPU_TYPES: usize = 64;

impl Fleet {
    /// The fleet of `pools`, checked: at least one and at most [`MAX_GPU_TYPES`]; names valid
    /// and unique; each pool's nodes and GPUs per node positive; memory positive and finite; at
    /// most 1,048,576 GPUs in all. The error names the pool (`types[1].memory_gib`).
    pub fn new(pools: Vec<GpuPool>) -> Result<Fleet> {
        let invalid = |field: String, reason: String| CoreError::InvalidCluster { field, reason };
        if pools.is_empty() || pools.len() > MAX_GPU_TYPES {
            return Err(invalid(
                "types".into(),
                format!(
                    "from 1 to {MAX_GPU_TYPES} GPU types are needed, got {}",
                    pools.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(pools.len());
        let mut total: u64 = 0;
        for (i, pool) in pools.iter().enumerate() {
            let field = |key: &str| format!("types[{i}].{key}");
            if !is_type_name(&pool.name) {
                return Err(invalid(
                    field("name"),
                    format!(
                        "{:?}: lower-case letters, digits, '-', '_' and '.', starting with a letter",
                        pool.name
                    ),
                ));
            }
            if !seen.insert(&*pool.name) {
                return Err(invalid(
                    field("name"),
                    format!("type {:?} is given twice", pool.name),
                ));
            }
            pool.cluster().validate().map_err(|e| match e {
                CoreError::InvalidCluster { field: key, reason } => invalid(field(&key), reason),
                other => other,
            })?;
            if !(pool.memory_gib.is_finite() && pool.memory_gib > 0.0) {
                return Err(invalid(
                    field("memory_gib"),
                    format!("must be a positive number, got {}", pool.memory_gib),
                ));
            }
            total += u64::from(pool.gpus());
        }
        if total > u64::from(crate::cluster::MAX_TOTAL_GPUS) {
            return Err(invalid(
                "types".into(),
                "more than 1,048,576 GPUs in total is not supported".into(),
            ));
        }
        let capacities = pools.iter().map(GpuPool::gpus).collect();
        Ok(Fleet { pools, capacities })
    }

    /// The fleet a topology's typed nodes make ([`Node::gpu_type`]), with each type's own
    /// topology (by type index, in order of first appearance); `None` when no node names a
    /// type. A node of no type is of type [`UNTYPED`]. A type's pool has as many nodes as it
    /// has with GPUs, each with the most any of them has (what its throughput models see of
    /// spanning nodes, as [`Topology::model_cluster`]); its capacity is what its nodes offer.
    pub fn of_topology(topology: &Topology) -> Option<(Fleet, Vec<Topology>)> {
        topology.nodes.iter().find(|n| n.gpu_type.is_some())?;
        let mut pools: Vec<GpuPool> = Vec::new();
        let mut topologies: Vec<Topology> = Vec::new();
        let mut capacities: Vec<GpuCount> = Vec::new();
        for node in &topology.nodes {
            let name = node.gpu_type.clone().unwrap_or_else(|| UNTYPED.into());
            let t = match pools.iter().position(|p| p.name == name) {
                Some(t) => t,
                None => {
                    pools.push(GpuPool {
                        name,
                        nodes: 0,
                        gpus_per_node: 0,
                        memory_gib: f64::INFINITY,
                    });
                    topologies.push(Topology::default());
                    capacities.push(0);
                    pools.len() - 1
                }
            };
            if node.gpus > 0 {
                pools[t].nodes += 1;
                pools[t].gpus_per_node = pools[t].gpus_per_node.max(node.gpus);
                capacities[t] += node.gpus;
            }
            topologies[t].nodes.push(node.clone());
        }
        Some((Fleet { pools, capacities }, topologies))
    }

    /// Every node of every type, typed, named `<type>-1`, `<type>-2`, … per type: a cluster
    /// the autoscaler and the simulator run on ([`Fleet::of_topology`] reads it back).
    pub fn topology(&self) -> Topology {
        Topology {
            nodes: self
                .topologies()
                .into_iter()
                .flat_map(|t| t.nodes)
                .collect(),
        }
    }

    /// A plain cluster as a fleet of one type, [`UNTYPED`], whose memory is not known to
    /// bound anything (jobs declare their own per-GPU limits).
    pub fn uniform(cluster: Cluster) -> Fleet {
        Fleet {
            pools: vec![GpuPool {
                name: UNTYPED.into(),
                nodes: cluster.nodes,
                gpus_per_node: cluster.gpus_per_node,
                memory_gib: f64::INFINITY,
            }],
            capacities: vec![cluster.total_gpus()],
        }
    }

    /// Its pools, in the order given: a type's index is its position here.
    pub fn pools(&self) -> &[GpuPool] {
        &self.pools
    }

    /// The index of the type named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.pools.iter().position(|p| &*p.name == name)
    }

    /// Each type's GPUs, by index: the knapsack's capacities.
    pub fn capacities(&self) -> Vec<GpuCount> {
        self.capacities.clone()
    }

    /// Every GPU of every type.
    pub fn total_gpus(&self) -> GpuCount {
        self.capacities.iter().sum()
    }

    /// Each type's nodes, by type index, named `<type>-1`, `<type>-2`, …: what
    /// [`crate::placement::place_by_type`] places on.
    pub fn topologies(&self) -> Vec<Topology> {
        self.pools
            .iter()
            .map(|pool| Topology {
                nodes: (1..=pool.nodes)
                    .map(|i| Node {
                        name: format!("{}-{i}", pool.name).into(),
                        gpus: pool.gpus_per_node,
                        gpu_type: Some(pool.name.clone()),
                    })
                    .collect(),
            })
            .collect()
    }

    /// Whether it has one type only: what a homogeneous cluster's decisions run on.
    pub fn is_uniform(&self) -> bool {
        self.pools.len() == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobfile::{parse_document, FileFormat};

    fn pool(name: &str, nodes: u32, per_node: u32, memory_gib: f64) -> GpuPool {
        GpuPool {
            name: name.into(),
            nodes,
            gpus_per_node: per_node,
            memory_gib,
        }
    }

    /// Types are counted, and checked for repeats in one pass (each was compared with every
    /// earlier one, and each is a capacity of every decision).
    #[test]
    fn a_fleet_of_too_many_types_is_refused_at_once() {
        let many = |n: usize| (0..n).map(|i| pool(&format!("t{i}"), 1, 1, 16.0)).collect();
        assert!(Fleet::new(many(MAX_GPU_TYPES)).is_ok());
        let e = Fleet::new(many(100_000)).unwrap_err().to_string();
        assert!(e.contains("types") && e.contains("100000"), "{e}");
        let mut twice: Vec<GpuPool> = many(MAX_GPU_TYPES - 1);
        twice.push(pool("t3", 1, 1, 16.0));
        let e = Fleet::new(twice).unwrap_err().to_string();
        assert!(
            e.contains("types[63].name") && e.contains("given twice"),
            "{e}"
        );
    }

    #[test]
    fn a_fleet_keeps_its_types_in_order() {
        let fleet = Fleet::new(vec![
            pool("t4", 4, 4, 16.0),
            pool("v100", 2, 8, 32.0),
            pool("a100", 2, 8, 80.0),
        ])
        .unwrap();
        assert_eq!(fleet.capacities(), vec![16, 16, 16]);
        assert_eq!((fleet.total_gpus(), fleet.index_of("a100")), (48, Some(2)));
        assert_eq!(fleet.pools()[0].cluster(), Cluster::new(4, 4).unwrap());
        assert!(!fleet.is_uniform() && Fleet::uniform(Cluster::new(2, 8).unwrap()).is_uniform());
    }

    #[test]
    fn a_typed_topology_reads_back_as_its_fleet() {
        let fleet = Fleet::new(vec![pool("t4", 2, 4, 16.0), pool("a100", 1, 8, 80.0)]).unwrap();
        let (read, topologies) = Fleet::of_topology(&fleet.topology()).unwrap();
        assert_eq!(read.capacities(), fleet.capacities());
        assert_eq!(topologies, fleet.topologies());
        for (a, b) in read.pools().iter().zip(fleet.pools()) {
            assert_eq!((&a.name, a.cluster()), (&b.name, b.cluster()));
        }
        // Nodes that differ: the capacity is what they offer; an untyped node is `gpu`.
        let mut topology = fleet.topology();
        topology.nodes[1].gpus = 1;
        topology.nodes.push(Node::untyped("spare", 2));
        let (read, topologies) = Fleet::of_topology(&topology).unwrap();
        assert_eq!(read.capacities(), vec![5, 8, 2]);
        assert_eq!(read.pools()[0].cluster(), Cluster::new(2, 4).unwrap());
        assert_eq!(&*read.pools()[2].name, UNTYPED);
        assert_eq!(topologies[2].nodes, vec![Node::untyped("spare", 2)]);
        assert!(Fleet::of_topology(&Topology::uniform(2, 8)).is_none());
    }

    #[test]
    fn each_type_places_its_own_jobs_on_its_own_nodes() {
        use crate::placement::{gpus_of, place_by_type, ShapeRule, Wanted};
        let fleet = Fleet::new(vec![pool("t4", 2, 4, 16.0), pool("a100", 1, 8, 80.0)]).unwrap();
        let topologies = fleet.topologies();
        let wanted = [
            (Wanted::new("a", 6, true), 0),
            (Wanted::new("b", 8, true), 1),
            (Wanted::new("c", 2, true), 0),
        ];
        let placed = place_by_type(&topologies, ShapeRule::Any, &|_| None, &wanted, 0);
        assert!(placed.unplaced.is_empty(), "{placed:?}");
        for (w, t) in &wanted {
            let shares = &placed.placement[&w.id];
            assert_eq!(gpus_of(shares), w.gpus);
            let prefix = format!("{}-", fleet.pools()[*t].name);
            assert!(
                shares.iter().all(|s| s.node.starts_with(&prefix)),
                "{shares:?}"
            );
        }
        // `b` moves to the T4 nodes: its A100 shares are no T4's, so it is placed afresh.
        let before = placed.placement.clone();
        let moved = [
            (Wanted::new("b", 2, true), 0),
            (Wanted::new("a", 6, false), 0),
        ];
        let again = place_by_type(
            &topologies,
            ShapeRule::Any,
            &|id| before.get(id).map(Vec::as_slice),
            &moved,
            0,
        );
        assert_eq!(again.placement["a"], before["a"], "a keeps its GPUs");
        assert!(again.placement["b"]
            .iter()
            .all(|s| s.node.starts_with("t4-")));
    }

    #[test]
    fn bad_fleets_are_refused_naming_the_field() {
        let cases: [(Vec<GpuPool>, &str); 6] = [
            (vec![], "'types'"),
            (vec![pool("A100", 1, 8, 80.0)], "'types[0].name'"),
            (
                vec![pool("a100", 1, 8, 80.0), pool("a100", 2, 8, 80.0)],
                "'types[1].name'",
            ),
            (
                vec![pool("t4", 1, 4, 16.0), pool("v100", 0, 8, 32.0)],
                "'types[1].nodes'",
            ),
            (vec![pool("t4", 1, 0, 16.0)], "'types[0].gpus_per_node'"),
            (vec![pool("t4", 1, 4, f64::NAN)], "'types[0].memory_gib'"),
        ];
        for (pools, field) in cases {
            let error = Fleet::new(pools).unwrap_err().to_string();
            assert!(error.contains(field), "{error} should name {field}");
        }
    }

    #[test]
    fn a_fleet_file_is_read_and_checked() {
        let json = r#"{"types": [
            {"name": "t4", "nodes": 4, "gpus_per_node": 4, "memory_gib": 16},
            {"name": "a100", "nodes": 2, "gpus_per_node": 8, "memory_gib": 80}
        ]}"#;
        let fleet: Fleet = parse_document(json, FileFormat::Json, "fleet.json").unwrap();
        assert_eq!(fleet.capacities(), vec![16, 16]);
        let round = serde_json::to_string(&fleet).unwrap();
        assert_eq!(
            parse_document::<Fleet>(&round, FileFormat::Json, "again").unwrap(),
            fleet
        );
        let cases = [
            (json.replace("a100", "t4"), FileFormat::Json, "given twice"),
            (
                "[[types]]\nname = \"a100\"\nnodes = 2\ngpus_per_node = 8\nmemory_gib = 80\ngpus = 3\n"
                    .to_string(),
                FileFormat::Toml,
                "fleet:6: field 'types[0].gpus'",
            ),
            (
                "[[types]]\nname = \"a100\"\nnodes = -2\ngpus_per_node = 8\nmemory_gib = 80\n"
                    .to_string(),
                FileFormat::Toml,
                "types[0].nodes",
            ),
        ];
        for (text, format, expected) in cases {
            let error = parse_document::<Fleet>(&text, format, "fleet")
                .unwrap_err()
                .to_string();
            assert!(
                error.starts_with("fleet") && error.contains(expected),
                "{error} should say {expected}"
            );
        }
    }
}
