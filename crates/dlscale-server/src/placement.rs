//! Node-aware placement: which nodes a job's GPUs sit on, in shapes the executor can launch.
//!
//! **The GPU-count rule.** A job with `g` GPUs runs on `n` nodes with the same `k = g / n` GPUs on
//! each (`sbatch --nodes=n --gres=gpu:k`, one torchrun per node with `--nproc-per-node=k`). Per-node
//! GRES in Slurm is one number for all the job's nodes, and torchrun's workers per node follow it,
//! so unequal splits (5 = 4 + 1) are never used. A count is *expressible* on a topology when some
//! divisor `n` of it has `n` nodes with at least `g / n` GPUs each; the controller offers the
//! allocator only expressible counts, so every decision can be placed on an idle cluster.
//!
//! **Packing.** Among the shapes of a count, the one with the fewest nodes that fits is used (a
//! job's throughput model depends on its node count, and the allocator assumes consolidated
//! placement); within a shape, the nodes with the least room that still fits are taken (best
//! fit), ties by node order. A job is never spread over more nodes than its count takes on the
//! idle cluster ([`Topology::packed_nodes`], the node count its value assumed): when fragmented
//! free GPUs only fit it spread wider, the controller falls back to a smaller option instead.
//! Jobs whose GPU count does not change keep their nodes.

use std::collections::BTreeMap;

use dlscale_core::Cluster;
use serde::{Deserialize, Serialize};

/// GPUs usable by dlscale on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// Node name (Slurm's `NodeName`; `local` for the local executor).
    pub name: String,
    /// GPUs dlscale may use on it (the node's GPUs minus those held by jobs dlscale did not start).
    pub gpus: u32,
    /// GPUs the node has in all.
    pub total_gpus: u32,
    /// Address workers use to reach it (Slurm's `NodeAddr`).
    pub addr: String,
}

/// The nodes dlscale may place jobs on, in a fixed order (Slurm's node order).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Usable nodes; nodes with no usable GPU are left out.
    pub nodes: Vec<NodeCapacity>,
}

/// GPUs of one job on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// Node name.
    pub node: String,
    /// GPUs on that node.
    pub gpus: u32,
}

/// Total GPUs of a placement.
pub fn gpus_of(shares: &[Share]) -> u32 {
    shares.iter().map(|s| s.gpus).sum()
}

/// Free GPUs per node name.
pub type FreeMap = BTreeMap<String, u32>;

impl Topology {
    /// GPUs dlscale may use in all.
    pub fn total(&self) -> u32 {
        self.nodes.iter().map(|n| n.gpus).sum()
    }

    /// The cluster the allocator's throughput models see: the usable nodes, each with the most
    /// GPUs any of them has (so `min_nodes_for` is the node count of the packed shape). `None`
    /// when no GPU is usable.
    pub fn model_cluster(&self) -> Option<Cluster> {
        let per_node = self.nodes.iter().map(|n| n.gpus).max()?;
        (per_node > 0).then_some(Cluster {
            nodes: self.nodes.len() as u32,
            gpus_per_node: per_node,
        })
    }

    /// The same nodes with all their GPUs (as if no other job held any).
    pub fn full(&self) -> Topology {
        Topology {
            nodes: self
                .nodes
                .iter()
                .map(|n| NodeCapacity {
                    gpus: n.total_gpus.max(n.gpus),
                    ..n.clone()
                })
                .collect(),
        }
    }

    /// Every node's usable GPUs, as a free map.
    pub fn free_map(&self) -> FreeMap {
        self.nodes
            .iter()
            .map(|n| (n.name.clone(), n.gpus))
            .collect()
    }

    /// Whether `gpus` can be placed on this topology with nothing else running.
    pub fn expressible(&self, gpus: u32) -> bool {
        self.packed_nodes(gpus).is_some()
    }

    /// The nodes `gpus` GPUs take with nothing else running (the consolidated shape its value
    /// assumes); `None` when the count is not expressible.
    pub fn packed_nodes(&self, gpus: u32) -> Option<u32> {
        place_one(self, &self.free_map(), gpus, u32::MAX).map(|s| s.len() as u32)
    }

    /// The address of a node (its name if unknown).
    pub fn addr_of(&self, node: &str) -> String {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .map_or_else(|| node.to_string(), |n| n.addr.clone())
    }
}

/// Places `gpus` GPUs on the nodes' `free` GPUs: the fewest nodes (at most `max_nodes`) with an
/// equal share each, best fit within that node count. `None` when no such shape fits. Does not
/// change `free`.
pub fn place_one(
    topology: &Topology,
    free: &FreeMap,
    gpus: u32,
    max_nodes: u32,
) -> Option<Vec<Share>> {
    if gpus == 0 {
        return None;
    }
    let nodes = topology.nodes.len() as u32;
    for n in (1..=nodes.min(gpus).min(max_nodes)).filter(|&n| gpus.is_multiple_of(n)) {
        let k = gpus / n;
        // (room, order) of every node with enough room; take the n tightest.
        let mut fits: Vec<(u32, usize, &str)> = topology
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(i, node)| {
                let room = free.get(&node.name).copied().unwrap_or(0);
                (room >= k).then_some((room, i, node.name.as_str()))
            })
            .collect();
        if fits.len() < n as usize {
            continue;
        }
        fits.sort();
        let mut chosen: Vec<(usize, &str)> = fits
            .into_iter()
            .take(n as usize)
            .map(|(_, i, name)| (i, name))
            .collect();
        chosen.sort();
        return Some(
            chosen
                .into_iter()
                .map(|(_, name)| Share {
                    node: name.to_string(),
                    gpus: k,
                })
                .collect(),
        );
    }
    None
}

/// Places `gpus` GPUs on `free` without spreading them over more nodes than the count takes on
/// the idle cluster ([`Topology::packed_nodes`]). `None` when that does not fit now.
pub fn place_packed(topology: &Topology, free: &FreeMap, gpus: u32) -> Option<Vec<Share>> {
    place_one(topology, free, gpus, topology.packed_nodes(gpus)?)
}

/// Takes a placement's GPUs out of `free` (saturating: a node that vanished has no room).
pub fn take(free: &mut FreeMap, shares: &[Share]) {
    for s in shares {
        if let Some(room) = free.get_mut(&s.node) {
            *room = room.saturating_sub(s.gpus);
        }
    }
}

/// Whether every share of a placement fits in `free`.
pub fn fits(free: &FreeMap, shares: &[Share]) -> bool {
    shares
        .iter()
        .all(|s| free.get(&s.node).is_some_and(|&room| room >= s.gpus))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(gpus: &[u32]) -> Topology {
        Topology {
            nodes: gpus
                .iter()
                .enumerate()
                .map(|(i, &g)| NodeCapacity {
                    name: format!("n{}", i + 1),
                    gpus: g,
                    total_gpus: 4,
                    addr: "127.0.0.1".into(),
                })
                .collect(),
        }
    }

    fn shape(shares: &[Share]) -> Vec<(&str, u32)> {
        shares.iter().map(|s| (s.node.as_str(), s.gpus)).collect()
    }

    #[test]
    fn packs_onto_fewest_nodes_with_equal_shares() {
        let t = topo(&[4, 4]);
        let free = t.free_map();
        assert_eq!(
            shape(&place_one(&t, &free, 3, u32::MAX).unwrap()),
            [("n1", 3)]
        );
        assert_eq!(
            shape(&place_one(&t, &free, 8, u32::MAX).unwrap()),
            [("n1", 4), ("n2", 4)]
        );
        assert_eq!(
            shape(&place_one(&t, &free, 6, u32::MAX).unwrap()),
            [("n1", 3), ("n2", 3)]
        );
        // 5 and 7 have no equal split over two 4-GPU nodes.
        assert!(!t.expressible(5) && !t.expressible(7) && !t.expressible(9));
        assert!((1..=4).chain([6, 8]).all(|g| t.expressible(g)));
    }

    #[test]
    fn best_fit_and_fragmentation() {
        let t = topo(&[4, 4]);
        let mut free = t.free_map();
        take(
            &mut free,
            &[Share {
                node: "n1".into(),
                gpus: 3,
            }],
        );
        // 1 GPU goes to the tight node, 2 to the roomy one.
        assert_eq!(
            shape(&place_one(&t, &free, 1, u32::MAX).unwrap()),
            [("n1", 1)]
        );
        assert_eq!(
            shape(&place_one(&t, &free, 2, u32::MAX).unwrap()),
            [("n2", 2)]
        );
        take(
            &mut free,
            &[Share {
                node: "n2".into(),
                gpus: 3,
            }],
        );
        // One GPU left on each node: 2 GPUs only as 1 + 1, 3 not at all.
        assert_eq!(
            shape(&place_one(&t, &free, 2, u32::MAX).unwrap()),
            [("n1", 1), ("n2", 1)]
        );
        assert!(place_one(&t, &free, 3, u32::MAX).is_none());
        assert!(fits(
            &free,
            &[Share {
                node: "n2".into(),
                gpus: 1
            }]
        ));
        assert!(!fits(
            &free,
            &[Share {
                node: "n3".into(),
                gpus: 1
            }]
        ));
    }

    #[test]
    fn fragmented_gpus_do_not_spread_a_job_wider_than_it_was_valued() {
        // 2×4 cluster, A holds 2 GPUs on n1, B 2 on n2; C was decided at 4 GPUs (one node).
        let t = topo(&[4, 4]);
        let mut free = t.free_map();
        for node in ["n1", "n2"] {
            take(
                &mut free,
                &[Share {
                    node: node.into(),
                    gpus: 2,
                }],
            );
        }
        assert_eq!(t.packed_nodes(4), Some(1));
        assert_eq!(t.packed_nodes(8), Some(2));
        // Unrestricted, 4 would go 2 + 2 over both nodes; packed it does not fit ...
        assert_eq!(
            shape(&place_one(&t, &free, 4, u32::MAX).unwrap()),
            [("n1", 2), ("n2", 2)]
        );
        assert!(place_packed(&t, &free, 4).is_none());
        // ... so the controller's fallback (options tried largest first) takes C's next smaller
        // option, 2 GPUs on one node.
        let options = [1, 2, 4];
        let placed = options
            .iter()
            .rev()
            .find_map(|&g| place_packed(&t, &free, g).map(|s| (g, s)))
            .unwrap();
        assert_eq!((placed.0, shape(&placed.1)), (2, vec![("n1", 2)]));
        // On an idle cluster 8 still spans both nodes.
        assert_eq!(
            shape(&place_packed(&t, &t.free_map(), 8).unwrap()),
            [("n1", 4), ("n2", 4)]
        );
    }

    #[test]
    fn model_cluster_uses_the_largest_node() {
        let t = topo(&[2, 4]);
        assert_eq!(
            t.model_cluster(),
            Some(Cluster {
                nodes: 2,
                gpus_per_node: 4
            })
        );
        assert_eq!(t.total(), 6);
        assert!(topo(&[]).model_cluster().is_none());
        assert_eq!(t.addr_of("n2"), "127.0.0.1");
        assert_eq!(t.addr_of("zz"), "zz");
    }
}
