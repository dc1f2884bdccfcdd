//! Placement: which nodes a job's GPUs sit on.
//!
//! Allocators decide GPU counts assuming consolidated placement (fewest nodes). This module makes
//! that real as far as possible without moving jobs that did not change: a job whose GPU count is
//! unchanged keeps its GPUs; changed and new jobs are placed largest first, each on as few nodes
//! as possible — whole free nodes for the bulk, then the best-fitting node for the rest.

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::GpuCount;

/// GPUs of one job on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeShare {
    /// Node index, 0-based.
    pub node: u32,
    /// GPUs on that node.
    pub gpus: GpuCount,
}

/// Where every placed job runs, by job id.
pub type Placement = BTreeMap<String, Vec<NodeShare>>;

/// Nodes a job spans.
pub fn nodes_spanned(shares: &[NodeShare]) -> u32 {
    shares.len() as u32
}

/// Places `wanted` (job id → GPUs, jobs with 0 omitted) given the `previous` placement. Jobs whose
/// GPU count is unchanged keep their GPUs. Returns `None` only when the total exceeds the cluster.
pub fn place(
    cluster: &Cluster,
    previous: &Placement,
    wanted: &[(String, GpuCount)],
) -> Option<Placement> {
    let total: u64 = wanted.iter().map(|(_, g)| u64::from(*g)).sum();
    if total > u64::from(cluster.total_gpus()) {
        return None;
    }
    let mut free = vec![cluster.gpus_per_node; cluster.nodes as usize];
    let mut placement = Placement::new();
    let mut to_place = Vec::new();
    for (id, gpus) in wanted.iter().filter(|(_, g)| *g > 0) {
        match previous.get(id) {
            Some(shares) if shares.iter().map(|s| s.gpus).sum::<GpuCount>() == *gpus => {
                for s in shares {
                    free[s.node as usize] -= s.gpus;
                }
                placement.insert(id.clone(), shares.clone());
            }
            _ => to_place.push((id.clone(), *gpus)),
        }
    }
    // Largest first: big jobs need whole nodes, small ones fill the gaps. Ties by id for determinism.
    to_place.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (id, gpus) in to_place {
        let shares = place_one(&mut free, cluster.gpus_per_node, gpus)?;
        placement.insert(id, shares);
    }
    Some(placement)
}

fn place_one(
    free: &mut [GpuCount],
    per_node: GpuCount,
    mut gpus: GpuCount,
) -> Option<Vec<NodeShare>> {
    let mut shares = Vec::new();
    // Whole free nodes for the bulk.
    while gpus >= per_node {
        let Some(node) = free.iter().position(|&f| f == per_node) else {
            break;
        };
        free[node] = 0;
        shares.push(NodeShare {
            node: node as u32,
            gpus: per_node,
        });
        gpus -= per_node;
    }
    // The rest on the node that fits it most tightly; failing that, the fullest-free nodes first.
    while gpus > 0 {
        let fitting = free
            .iter()
            .enumerate()
            .filter(|(_, &f)| f >= gpus)
            .min_by_key(|(i, &f)| (f, *i));
        let (node, take) = match fitting {
            Some((node, _)) => (node, gpus),
            None => {
                let (node, &f) = free
                    .iter()
                    .enumerate()
                    .filter(|(_, &f)| f > 0)
                    .max_by_key(|(i, &f)| (f, std::cmp::Reverse(*i)))?;
                (node, f)
            }
        };
        free[node] -= take;
        shares.push(NodeShare {
            node: node as u32,
            gpus: take,
        });
        gpus -= take;
    }
    shares.sort_by_key(|s| s.node);
    Some(shares)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(spec: &[(&str, GpuCount)]) -> Vec<(String, GpuCount)> {
        spec.iter().map(|(id, g)| (id.to_string(), *g)).collect()
    }

    #[test]
    fn consolidates_on_an_empty_cluster() {
        let cluster = Cluster::new(4, 4).unwrap();
        let p = place(
            &cluster,
            &Placement::new(),
            &wanted(&[("a", 8), ("b", 3), ("c", 1), ("d", 4)]),
        )
        .unwrap();
        assert_eq!(nodes_spanned(&p["a"]), 2);
        assert_eq!(nodes_spanned(&p["d"]), 1);
        assert_eq!(nodes_spanned(&p["b"]), 1);
        assert_eq!(nodes_spanned(&p["c"]), 1);
        let mut used = [0; 4];
        for shares in p.values() {
            for s in shares {
                used[s.node as usize] += s.gpus;
            }
        }
        assert_eq!(used, [4, 4, 4, 4]);
    }

    #[test]
    fn unchanged_jobs_stay_put_and_others_fill_gaps() {
        let cluster = Cluster::new(2, 4).unwrap();
        let first = place(
            &cluster,
            &Placement::new(),
            &wanted(&[("a", 2), ("b", 2), ("c", 2)]),
        )
        .unwrap();
        let second = place(&cluster, &first, &wanted(&[("a", 2), ("c", 2), ("d", 4)])).unwrap();
        assert_eq!(second["a"], first["a"]);
        assert_eq!(second["c"], first["c"]);
        assert_eq!(second["d"].iter().map(|s| s.gpus).sum::<u32>(), 4);
        assert!(place(&cluster, &first, &wanted(&[("a", 9)])).is_none());
    }
}
