//! Placement: which nodes a job's GPUs sit on, under a shape rule.
//!
//! Policies decide GPU counts assuming consolidated placement (the fewest nodes the count takes
//! on the idle cluster). [`place`] makes that real as far as possible without moving jobs whose
//! count did not change: they keep their GPUs; changed and new jobs are placed largest first, each
//! on as few nodes as the [`ShapeRule`] allows, best fit. A defragmenting repack may then move a
//! bounded number of unchanged jobs when that consolidates jobs that spread wider than needed.
//!
//! The shape rules:
//! - [`ShapeRule::Any`]: any split over nodes (whole free nodes for the bulk, then the
//!   best-fitting node, then spill over the fullest ones). The simulator's model of a cluster.
//! - [`ShapeRule::EqualPerNode`]: `g` GPUs on `n` nodes with the same `g / n` on each — Slurm's
//!   per-node GRES is one number per job, and torchrun's workers per node follow it — never on
//!   more nodes than the count takes on the idle cluster (the node count its value assumed).
//! - [`ShapeRule::WholeNodes`]: whole nodes only (a count is a sum of whole nodes' GPUs).
//! - [`ShapeRule::MostFree`]: Pollux's artifact simulator's rule for its baselines: chunk by
//!   chunk, as many GPUs as are still needed from the node with the most free GPUs (lowest index
//!   on ties); jobs are placed in the order given (the policy's), not largest first, and the
//!   shares keep the order they were taken in (the artifact's placement tuple, e.g. `3+1`); no
//!   defragmenting repack (the artifact never moves a job whose count is unchanged).
//!
//! A count a rule cannot place even on the idle cluster is not *allowed*
//! ([`Topology::allowed_counts`]); callers offer policies only allowed counts, so that every
//! decision can be placed once the GPUs it needs are free.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::GpuCount;

/// How a job's GPUs may be split over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShapeRule {
    /// Any split.
    #[default]
    Any,
    /// The same number of GPUs on every node the job uses (Slurm, torchrun).
    EqualPerNode,
    /// Whole nodes only.
    WholeNodes,
    /// The node with the most free GPUs first, chunk by chunk, in the policy's order (Pollux's
    /// artifact simulator).
    MostFree,
}

impl ShapeRule {
    /// Every rule.
    pub const ALL: [ShapeRule; 4] = [
        ShapeRule::Any,
        ShapeRule::EqualPerNode,
        ShapeRule::WholeNodes,
        ShapeRule::MostFree,
    ];

    /// Its name (command line, configuration).
    pub fn name(self) -> &'static str {
        match self {
            ShapeRule::Any => "any",
            ShapeRule::EqualPerNode => "equal-per-node",
            ShapeRule::WholeNodes => "whole-nodes",
            ShapeRule::MostFree => "most-free",
        }
    }
}

impl fmt::Display for ShapeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ShapeRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ShapeRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown shape rule '{s}' (expected any, equal-per-node, whole-nodes or most-free)"
                )
            })
    }
}

/// GPUs usable on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Its name (Slurm's `NodeName`; `local` for one machine; `n1`, `n2`, ... in simulations);
    /// shared, since every share placed on the node carries it.
    pub name: Arc<str>,
    /// GPUs dlscale may use on it.
    pub gpus: GpuCount,
    /// Its GPU type (Slurm's typed GRES, `gpu:a100:4`; a fleet's pool), when the cluster
    /// names types: a topology whose nodes name types is a fleet ([`crate::Fleet::of_topology`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<Arc<str>>,
}

impl Node {
    /// A node of `gpus` GPUs of no named type.
    pub fn untyped(name: impl Into<Arc<str>>, gpus: GpuCount) -> Node {
        Node {
            name: name.into(),
            gpus,
            gpu_type: None,
        }
    }
}

/// The nodes jobs may be placed on, in a fixed order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// The nodes.
    pub nodes: Vec<Node>,
}

/// GPUs of one job on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// Node name (shared with the topology's: decisions clone shares by the thousand).
    pub node: Arc<str>,
    /// GPUs on that node.
    pub gpus: GpuCount,
}

/// Where every placed job runs, by job id.
pub type Placement = BTreeMap<String, Vec<Share>>;

/// Total GPUs of a job's shares.
pub fn gpus_of(shares: &[Share]) -> GpuCount {
    shares.iter().map(|s| s.gpus).sum()
}

impl Topology {
    /// `nodes` nodes named `n1`, `n2`, ... with `gpus_per_node` GPUs each.
    pub fn uniform(nodes: u32, gpus_per_node: GpuCount) -> Self {
        Topology {
            nodes: (1..=nodes)
                .map(|i| Node::untyped(format!("n{i}"), gpus_per_node))
                .collect(),
        }
    }

    /// The topology of a homogeneous cluster.
    pub fn of_cluster(cluster: &Cluster) -> Self {
        Self::uniform(cluster.nodes, cluster.gpus_per_node)
    }

    /// GPUs in all.
    pub fn total(&self) -> GpuCount {
        self.nodes.iter().map(|n| n.gpus).sum()
    }

    /// The cluster throughput models see: the nodes, each with the most GPUs any of them has (so
    /// that `min_nodes_for` is the node count of a packed shape). `None` without a usable GPU.
    pub fn model_cluster(&self) -> Option<Cluster> {
        let per_node = self.nodes.iter().map(|n| n.gpus).max()?;
        (per_node > 0).then_some(Cluster {
            nodes: self.nodes.len() as u32,
            gpus_per_node: per_node,
        })
    }

    /// `allowed[g]`: whether `rule` can place `g` GPUs on the idle topology, for `g` up to the
    /// total. What placing each count in turn would find, in time linear in the GPUs (that took
    /// seconds on tens of thousands of GPUs, at every start and submission).
    pub fn allowed_counts(&self, rule: ShapeRule) -> Vec<bool> {
        let total = self.total();
        let mut allowed = vec![false; total as usize + 1];
        // Node sizes, largest first.
        let mut sizes: Vec<GpuCount> = self
            .nodes
            .iter()
            .map(|n| n.gpus)
            .filter(|&g| g > 0)
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        match rule {
            // On idle nodes, any count up to the total splits somehow.
            ShapeRule::Any | ShapeRule::MostFree => allowed[1..].fill(true),
            // n nodes of k GPUs each: there are n nodes of k or more while the n-th largest
            // has k.
            ShapeRule::EqualPerNode => {
                for (n, &largest_k) in (1..).zip(&sizes) {
                    for k in 1..=largest_k {
                        allowed[(n * k) as usize] = true;
                    }
                }
            }
            // Whole nodes, largest first, each taken while it fits what is left: per size,
            // as many of its nodes as fit.
            ShapeRule::WholeNodes => {
                let mut groups: Vec<(GpuCount, GpuCount)> = Vec::new();
                for &size in &sizes {
                    match groups.last_mut() {
                        Some((s, count)) if *s == size => *count += 1,
                        _ => groups.push((size, 1)),
                    }
                }
                for g in 1..=total {
                    let left = groups.iter().fold(g, |left, &(size, count)| {
                        left - size * count.min(left / size)
                    });
                    allowed[g as usize] = left == 0;
                }
            }
        }
        allowed
    }

    /// The nodes `gpus` GPUs take on the idle topology under `rule` (the consolidated shape a
    /// value assumes); `None` when the count cannot be placed at all.
    pub fn packed_nodes(&self, rule: ShapeRule, gpus: GpuCount) -> Option<u32> {
        place_one(self, rule, &self.idle(), gpus, u32::MAX).map(|s| s.len() as u32)
    }

    fn idle(&self) -> Vec<GpuCount> {
        self.nodes.iter().map(|n| n.gpus).collect()
    }

    /// Node index by name, for many lookups.
    fn indices(&self) -> HashMap<&str, usize> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (&*n.name, i))
            .collect()
    }
}

/// One job [`place`] is asked to place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// Job id.
    pub id: String,
    /// GPUs it is to get (0: none).
    pub gpus: GpuCount,
    /// It restarts anyway (its batch changes, or it is not running yet): it may move for free.
    pub restarts: bool,
}

impl Wanted {
    /// `id` at `gpus` GPUs, restarting anyway or not.
    pub fn new(id: impl Into<String>, gpus: GpuCount, restarts: bool) -> Self {
        Wanted {
            id: id.into(),
            gpus,
            restarts,
        }
    }
}

/// What [`place`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placed {
    /// Where each placed job runs.
    pub placement: Placement,
    /// Jobs whose GPU count did not change but which the defragmenting repack moved (they
    /// restart).
    pub moved: Vec<String>,
    /// Jobs that could not be placed under the rule now (fragmentation), with the largest
    /// allowed count below theirs that would have fit (0: none).
    pub unplaced: Vec<(String, GpuCount)>,
}

/// Places `wanted` on `topology` under `rule`, given each job's `previous` shares (a lookup by
/// job id): jobs whose count is unchanged keep their GPUs (when these still exist). With `defragment_moves_per_job > 0`,
/// when a job that restarts anyway lands on more nodes than its count takes on the idle
/// topology, all jobs are placed afresh if that spreads fewer jobs and moves at most this many
/// jobs that would not restart otherwise per job it consolidates.
pub fn place<'a>(
    topology: &Topology,
    rule: ShapeRule,
    previous: &dyn Fn(&str) -> Option<&'a [Share]>,
    wanted: &[Wanted],
    defragment_moves_per_job: u32,
) -> Placed {
    let mut placed = place_keeping(topology, rule, previous, wanted);
    // Pollux's artifact never moves a job whose count is unchanged: its rule has no repack.
    if defragment_moves_per_job == 0 || rule == ShapeRule::MostFree {
        return placed;
    }
    // The packed node count of each count wanted, computed once.
    let mut packed: HashMap<GpuCount, Option<u32>> = HashMap::new();
    for w in wanted {
        packed
            .entry(w.gpus)
            .or_insert_with(|| topology.packed_nodes(rule, w.gpus));
    }
    let spread = |p: &Placement, id: &str, gpus: GpuCount| {
        p.get(id).is_some_and(|s| {
            packed
                .get(&gpus)
                .copied()
                .flatten()
                .is_some_and(|packed| s.len() as u32 > packed)
        })
    };
    let kept = |w: &Wanted| {
        !w.restarts
            && previous(&w.id).is_some_and(|s| {
                gpus_of(s) == w.gpus && placed.placement.get(&w.id).map(Vec::as_slice) == Some(s)
            })
    };
    let changed_spread = wanted
        .iter()
        .any(|w| w.gpus > 0 && !kept(w) && spread(&placed.placement, &w.id, w.gpus));
    if !changed_spread {
        return placed;
    }
    let fresh = place_keeping(topology, rule, &|_| None, wanted);
    if !fresh.unplaced.is_empty() {
        return placed;
    }
    let fragmented = |p: &Placement| {
        wanted
            .iter()
            .filter(|w| w.gpus > 0 && spread(p, &w.id, w.gpus))
            .count()
    };
    let gained = fragmented(&placed.placement).saturating_sub(fragmented(&fresh.placement));
    let moved: Vec<String> = wanted
        .iter()
        .filter(|w| {
            w.gpus > 0 && kept(w) && placed.placement.get(&w.id) != fresh.placement.get(&w.id)
        })
        .map(|w| w.id.clone())
        .collect();
    if gained > 0 && moved.len() <= gained.saturating_mul(defragment_moves_per_job as usize) {
        placed = Placed {
            placement: fresh.placement,
            moved,
            unplaced: Vec::new(),
        };
    }
    placed
}

/// Places each job on the nodes of its GPU type: `wanted` pairs a job with the index of its
/// type's topology in `topologies`. The types are placed independently, each as [`place`]
/// places a cluster; a job whose type changed finds its previous shares on no node of its new
/// type, and is placed afresh there.
pub fn place_by_type<'a>(
    topologies: &[Topology],
    rule: ShapeRule,
    previous: &dyn Fn(&str) -> Option<&'a [Share]>,
    wanted: &[(Wanted, usize)],
    defragment_moves_per_job: u32,
) -> Placed {
    let mut placed = Placed::default();
    for (t, topology) in topologies.iter().enumerate() {
        let on_type: Vec<Wanted> = wanted
            .iter()
            .filter(|(_, of)| *of == t)
            .map(|(w, _)| w.clone())
            .collect();
        let one = place(topology, rule, previous, &on_type, defragment_moves_per_job);
        placed.placement.extend(one.placement);
        placed.moved.extend(one.moved);
        placed.unplaced.extend(one.unplaced);
    }
    placed
}

/// The largest count up to `gpus` that `rule` can place on the GPUs `placement` leaves free
/// besides job `id`'s own, on no more nodes than the count takes on the idle topology (0: none).
/// What a job that `placement` spreads could get consolidated instead.
pub fn largest_packed_fit(
    topology: &Topology,
    rule: ShapeRule,
    placement: &Placement,
    id: &str,
    gpus: GpuCount,
) -> GpuCount {
    let mut free = topology.idle();
    let index = topology.indices();
    for (job, shares) in placement.iter().filter(|(job, _)| job.as_str() != id) {
        for s in shares {
            if let Some(&i) = index.get(&*s.node) {
                free[i] = free[i].saturating_sub(s.gpus);
            }
            debug_assert!(index.contains_key(&*s.node), "{job} on an unknown node");
        }
    }
    (1..=gpus)
        .rev()
        .find(|&g| {
            topology
                .packed_nodes(rule, g)
                .is_some_and(|packed| place_one(topology, rule, &free, g, packed).is_some())
        })
        .unwrap_or(0)
}

/// [`place`] without the repack.
fn place_keeping<'a>(
    topology: &Topology,
    rule: ShapeRule,
    previous: &dyn Fn(&str) -> Option<&'a [Share]>,
    wanted: &[Wanted],
) -> Placed {
    let mut free = topology.idle();
    let index = topology.indices();
    let mut placed = Placed::default();
    let mut to_place = Vec::new();
    for Wanted { id, gpus, .. } in wanted.iter().filter(|w| w.gpus > 0) {
        let keep = previous(id).filter(|shares| {
            gpus_of(shares) == *gpus
                && shares
                    .iter()
                    .all(|s| index.get(&*s.node).is_some_and(|&i| free[i] >= s.gpus))
        });
        match keep {
            Some(shares) => {
                for s in shares {
                    if let Some(&i) = index.get(&*s.node) {
                        free[i] -= s.gpus;
                    }
                }
                placed.placement.insert(id.clone(), shares.to_vec());
            }
            None => to_place.push((id.clone(), *gpus)),
        }
    }
    // Largest first: big jobs need whole nodes, small ones fill the gaps. Ties by id. The
    // artifact's rule places in the order it is given.
    if rule != ShapeRule::MostFree {
        to_place.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    for (id, gpus) in to_place {
        let widest = match rule {
            ShapeRule::EqualPerNode => topology.packed_nodes(rule, gpus).unwrap_or(0),
            _ => u32::MAX,
        };
        match place_one(topology, rule, &free, gpus, widest) {
            Some(shares) => {
                for s in &shares {
                    if let Some(&i) = index.get(&*s.node) {
                        free[i] -= s.gpus;
                    }
                }
                placed.placement.insert(id, shares);
            }
            None => {
                let fits = (1..gpus)
                    .rev()
                    .find(|&g| {
                        topology.packed_nodes(rule, g).is_some_and(|packed| {
                            place_one(topology, rule, &free, g, packed).is_some()
                        })
                    })
                    .unwrap_or(0);
                placed.unplaced.push((id, fits));
            }
        }
    }
    placed
}

/// One job's shares of `gpus` GPUs on the nodes' `free` GPUs under `rule`, on at most
/// `max_nodes` nodes; `None` when it does not fit. Does not change `free`.
fn place_one(
    topology: &Topology,
    rule: ShapeRule,
    free: &[GpuCount],
    gpus: GpuCount,
    max_nodes: u32,
) -> Option<Vec<Share>> {
    if gpus == 0 || gpus > free.iter().sum::<GpuCount>() {
        return None;
    }
    let picked: Vec<(usize, GpuCount)> = match rule {
        ShapeRule::Any => place_any(free, topology, gpus)?,
        ShapeRule::EqualPerNode => place_equal(free, gpus, max_nodes)?,
        ShapeRule::WholeNodes => place_whole(free, topology, gpus)?,
        ShapeRule::MostFree => place_most_free(free, gpus)?,
    };
    if picked.len() as u32 > max_nodes {
        return None;
    }
    let mut picked = picked;
    if rule != ShapeRule::MostFree {
        picked.sort_by_key(|&(i, _)| i);
    }
    Some(
        picked
            .into_iter()
            .map(|(i, g)| Share {
                node: topology.nodes[i].name.clone(),
                gpus: g,
            })
            .collect(),
    )
}

/// Any split: whole free nodes for the bulk, then the node that fits the rest most tightly,
/// failing that the nodes with the most free GPUs first.
fn place_any(
    free: &[GpuCount],
    topology: &Topology,
    gpus: GpuCount,
) -> Option<Vec<(usize, GpuCount)>> {
    let mut free = free.to_vec();
    let mut left = gpus;
    let mut picked = Vec::new();
    let per_node = topology.nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
    while per_node > 0 && left >= per_node {
        let Some(i) = (0..free.len()).find(|&i| free[i] == per_node) else {
            break;
        };
        free[i] = 0;
        picked.push((i, per_node));
        left -= per_node;
    }
    while left > 0 {
        let fitting = (0..free.len())
            .filter(|&i| free[i] >= left)
            .min_by_key(|&i| (free[i], i));
        let (i, take) = match fitting {
            Some(i) => (i, left),
            None => {
                let i = (0..free.len())
                    .filter(|&i| free[i] > 0)
                    .max_by_key(|&i| (free[i], std::cmp::Reverse(i)))?;
                (i, free[i])
            }
        };
        free[i] -= take;
        picked.push((i, take));
        left -= take;
    }
    Some(picked)
}

/// Pollux's artifact: as many GPUs as still needed from the node with the most free GPUs (the
/// lowest index on ties), until the job has all; chunks in the order taken.
fn place_most_free(free: &[GpuCount], gpus: GpuCount) -> Option<Vec<(usize, GpuCount)>> {
    let mut free = free.to_vec();
    let mut left = gpus;
    let mut picked = Vec::new();
    while left > 0 {
        let i = (0..free.len()).fold(0, |best, i| if free[i] > free[best] { i } else { best });
        let take = free.get(i).copied().unwrap_or(0).min(left);
        if take == 0 {
            return None;
        }
        free[i] -= take;
        picked.push((i, take));
        left -= take;
    }
    Some(picked)
}

/// Equal shares: the fewest nodes `n` (dividing `gpus`, at most `max_nodes`) that have `gpus /
/// n` free each; the tightest such nodes, ties by node order.
fn place_equal(
    free: &[GpuCount],
    gpus: GpuCount,
    max_nodes: u32,
) -> Option<Vec<(usize, GpuCount)>> {
    let nodes = free.len() as u32;
    (1..=nodes.min(gpus).min(max_nodes))
        .filter(|&n| gpus.is_multiple_of(n))
        .find_map(|n| {
            let k = gpus / n;
            let mut fits: Vec<(GpuCount, usize)> = (0..free.len())
                .filter(|&i| free[i] >= k)
                .map(|i| (free[i], i))
                .collect();
            if fits.len() < n as usize {
                return None;
            }
            fits.sort();
            Some(
                fits.into_iter()
                    .take(n as usize)
                    .map(|(_, i)| (i, k))
                    .collect(),
            )
        })
}

/// Whole nodes: entirely free nodes whose GPUs add up to exactly `gpus`, largest nodes first.
fn place_whole(
    free: &[GpuCount],
    topology: &Topology,
    gpus: GpuCount,
) -> Option<Vec<(usize, GpuCount)>> {
    let mut idle: Vec<usize> = (0..free.len())
        .filter(|&i| free[i] > 0 && free[i] == topology.nodes[i].gpus)
        .collect();
    idle.sort_by_key(|&i| (std::cmp::Reverse(free[i]), i));
    let mut left = gpus;
    let mut picked = Vec::new();
    for i in idle {
        if free[i] <= left {
            left -= free[i];
            picked.push((i, free[i]));
        }
        if left == 0 {
            return Some(picked);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The allowed counts are what placing each count in turn on the idle nodes finds,
        /// for every rule, on nodes of mixed sizes.
        #[test]
        fn allowed_counts_are_what_placing_each_count_finds(
            gpus in prop::collection::vec(0u32..9, 1..7),
        ) {
            let topology = uneven(&gpus);
            let free = topology.idle();
            for rule in [
                ShapeRule::Any,
                ShapeRule::EqualPerNode,
                ShapeRule::WholeNodes,
                ShapeRule::MostFree,
            ] {
                let placed: Vec<bool> = (0..=topology.total())
                    .map(|g| g > 0 && place_one(&topology, rule, &free, g, u32::MAX).is_some())
                    .collect();
                prop_assert_eq!(topology.allowed_counts(rule), placed, "{:?} on {:?}", rule, gpus);
            }
        }
    }

    fn wanted(spec: &[(&str, GpuCount)]) -> Vec<Wanted> {
        spec.iter()
            .map(|(id, g)| Wanted::new(*id, *g, false))
            .collect()
    }

    fn lookup<'a>(p: &'a Placement) -> impl Fn(&str) -> Option<&'a [Share]> + 'a {
        move |id| p.get(id).map(Vec::as_slice)
    }

    fn shape(shares: &[Share]) -> Vec<(&str, GpuCount)> {
        shares.iter().map(|s| (&*s.node, s.gpus)).collect()
    }

    fn uneven(gpus: &[GpuCount]) -> Topology {
        Topology {
            nodes: gpus
                .iter()
                .enumerate()
                .map(|(i, &g)| Node::untyped(format!("n{}", i + 1), g))
                .collect(),
        }
    }

    #[test]
    fn any_consolidates_on_an_empty_cluster() {
        let t = Topology::uniform(4, 4);
        let p = place(
            &t,
            ShapeRule::Any,
            &|_| None,
            &wanted(&[("a", 8), ("b", 3), ("c", 1), ("d", 4)]),
            0,
        );
        assert!(p.unplaced.is_empty());
        let spans: Vec<usize> = ["a", "b", "c", "d"]
            .iter()
            .map(|id| p.placement[*id].len())
            .collect();
        assert_eq!(spans, [2, 1, 1, 1]);
        let mut used = BTreeMap::new();
        for s in p.placement.values().flatten() {
            *used.entry(s.node.clone()).or_insert(0) += s.gpus;
        }
        assert!(used.values().all(|&g| g == 4), "{used:?}");
    }

    #[test]
    fn unchanged_jobs_stay_put_and_others_fill_gaps() {
        let t = Topology::uniform(2, 4);
        let first = place(
            &t,
            ShapeRule::Any,
            &|_| None,
            &wanted(&[("a", 2), ("b", 2), ("c", 2)]),
            0,
        );
        let second = place(
            &t,
            ShapeRule::Any,
            &lookup(&first.placement),
            &wanted(&[("a", 2), ("c", 2), ("d", 4)]),
            0,
        );
        assert_eq!(second.placement["a"], first.placement["a"]);
        assert_eq!(second.placement["c"], first.placement["c"]);
        assert_eq!(gpus_of(&second.placement["d"]), 4);
        let over = place(
            &t,
            ShapeRule::Any,
            &lookup(&first.placement),
            &wanted(&[("a", 9)]),
            0,
        );
        assert_eq!(
            over.unplaced,
            [("a".to_string(), 8)],
            "9 GPUs do not fit, 8 would"
        );
    }

    #[test]
    fn equal_per_node_counts_and_packing() {
        let t = Topology::uniform(2, 4);
        let allowed = t.allowed_counts(ShapeRule::EqualPerNode);
        let ok: Vec<GpuCount> = (0..=8).filter(|&g| allowed[g as usize]).collect();
        assert_eq!(
            ok,
            [1, 2, 3, 4, 6, 8],
            "5 and 7 have no equal split over two 4-GPU nodes"
        );
        let p = place(
            &t,
            ShapeRule::EqualPerNode,
            &|_| None,
            &wanted(&[("a", 6)]),
            0,
        );
        assert_eq!(shape(&p.placement["a"]), [("n1", 3), ("n2", 3)]);
        // A holds 2 on n1, B 2 on n2; C decided at 4 would only fit as 2 + 2, wider than the one
        // node 4 GPUs take: not placed, and 2 would fit.
        let mut previous = Placement::new();
        previous.insert(
            "a".into(),
            vec![Share {
                node: "n1".into(),
                gpus: 2,
            }],
        );
        previous.insert(
            "b".into(),
            vec![Share {
                node: "n2".into(),
                gpus: 2,
            }],
        );
        let p = place(
            &t,
            ShapeRule::EqualPerNode,
            &lookup(&previous),
            &wanted(&[("a", 2), ("b", 2), ("c", 4)]),
            0,
        );
        assert_eq!(p.unplaced, [("c".to_string(), 2)]);
        // With Any it spreads.
        let p = place(
            &t,
            ShapeRule::Any,
            &lookup(&previous),
            &wanted(&[("a", 2), ("b", 2), ("c", 4)]),
            0,
        );
        assert_eq!(shape(&p.placement["c"]), [("n1", 2), ("n2", 2)]);
        // Uneven nodes: 4 + 2 usable; the model cluster uses the largest node.
        let t = uneven(&[4, 2]);
        assert_eq!(
            t.model_cluster(),
            Some(Cluster {
                nodes: 2,
                gpus_per_node: 4
            })
        );
        assert_eq!(t.packed_nodes(ShapeRule::EqualPerNode, 4), Some(1));
        assert_eq!(t.packed_nodes(ShapeRule::EqualPerNode, 6), None);
        assert_eq!(t.packed_nodes(ShapeRule::Any, 6), Some(2));
    }

    #[test]
    fn whole_nodes_take_entire_nodes() {
        let t = Topology::uniform(3, 4);
        let allowed = t.allowed_counts(ShapeRule::WholeNodes);
        let ok: Vec<GpuCount> = (0..=12).filter(|&g| allowed[g as usize]).collect();
        assert_eq!(ok, [4, 8, 12]);
        let p = place(
            &t,
            ShapeRule::WholeNodes,
            &|_| None,
            &wanted(&[("a", 8), ("b", 4)]),
            0,
        );
        assert_eq!(shape(&p.placement["a"]), [("n1", 4), ("n2", 4)]);
        assert_eq!(shape(&p.placement["b"]), [("n3", 4)]);
    }

    #[test]
    fn most_free_takes_chunks_from_the_emptiest_node_in_the_given_order() {
        let t = Topology::uniform(3, 4);
        // In the order given, not largest first: a takes n1 (all tie at 4: lowest index), b the
        // emptiest node then (n2), c the next one (n3), d 2 of n2's then 1 of n1's.
        let p = place(
            &t,
            ShapeRule::MostFree,
            &|_| None,
            &wanted(&[("a", 3), ("b", 2), ("c", 4), ("d", 3)]),
            0,
        );
        assert!(p.unplaced.is_empty());
        assert_eq!(shape(&p.placement["a"]), [("n1", 3)]);
        assert_eq!(shape(&p.placement["b"]), [("n2", 2)]);
        assert_eq!(shape(&p.placement["c"]), [("n3", 4)]);
        // The chunks keep the order taken (the artifact's placement tuple 2+1, not node order).
        assert_eq!(shape(&p.placement["d"]), [("n2", 2), ("n1", 1)]);
        // Unchanged jobs stay; a job wider than any node spreads over the emptiest ones.
        let q = place(
            &t,
            ShapeRule::MostFree,
            &lookup(&p.placement),
            &wanted(&[("c", 4), ("e", 6)]),
            0,
        );
        assert_eq!(q.placement["c"], p.placement["c"]);
        assert_eq!(shape(&q.placement["e"]), [("n1", 4), ("n2", 2)]);
        // On the idle cluster it packs, so every count is allowed.
        assert_eq!(t.packed_nodes(ShapeRule::MostFree, 9), Some(3));
        assert!(t.allowed_counts(ShapeRule::MostFree)[1..]
            .iter()
            .all(|&a| a));
    }

    #[test]
    fn the_repack_consolidates_within_its_budget() {
        // a (2) on n1, b (2) on n2 leave 2 + 2: c at 4 spreads. Moving b to n1 consolidates c.
        let t = Topology::uniform(2, 4);
        let mut previous = Placement::new();
        previous.insert(
            "a".into(),
            vec![Share {
                node: "n1".into(),
                gpus: 2,
            }],
        );
        previous.insert(
            "b".into(),
            vec![Share {
                node: "n2".into(),
                gpus: 2,
            }],
        );
        let want = wanted(&[("a", 2), ("b", 2), ("c", 4)]);
        let no = place(&t, ShapeRule::Any, &lookup(&previous), &want, 0);
        assert_eq!(no.placement["c"].len(), 2);
        assert!(no.moved.is_empty());
        let yes = place(&t, ShapeRule::Any, &lookup(&previous), &want, 1);
        assert_eq!(yes.placement["c"].len(), 1, "{yes:?}");
        assert_eq!(yes.moved.len(), 1, "{yes:?}");
        for s in yes.placement.values() {
            assert!(s.len() == 1);
        }
    }

    #[test]
    fn largest_packed_fit_counts_what_the_others_leave_on_fewest_nodes() {
        let topology = Topology::uniform(3, 4);
        let share = |node: &str, gpus| Share {
            node: node.into(),
            gpus,
        };
        // a: 3 on n1; c: 3 on n2; b spread over n1, n2 and n3.
        let placement: Placement = [
            ("a".to_string(), vec![share("n1", 3)]),
            ("c".to_string(), vec![share("n2", 3)]),
            (
                "b".to_string(),
                vec![share("n1", 1), share("n2", 1), share("n3", 2)],
            ),
        ]
        .into_iter()
        .collect();
        // Without b: n1 and n2 have 1 free, n3 all 4: 4 fit on one node, 5 on two (4 + 1).
        for (gpus, fits) in [(1, 1), (3, 3), (4, 4), (5, 5), (6, 5)] {
            assert_eq!(
                largest_packed_fit(&topology, ShapeRule::Any, &placement, "b", gpus),
                fits,
                "{gpus}"
            );
        }
        // Seen from a (b's shares count): n1 has 3 free, n2 none, n3 2: 3 on one node, 5 on two.
        assert_eq!(
            largest_packed_fit(&topology, ShapeRule::Any, &placement, "a", 6),
            5
        );
        assert_eq!(
            largest_packed_fit(&topology, ShapeRule::Any, &placement, "a", 4),
            3
        );
        assert_eq!(
            largest_packed_fit(&topology, ShapeRule::WholeNodes, &placement, "b", 8),
            4
        );
    }
}
