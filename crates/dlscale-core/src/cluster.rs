//! The cluster: identical nodes, each with the same number of GPUs.

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, Result};
use crate::GpuCount;

/// The most GPUs a cluster may have in total (1,048,576): the allocator's tables are sized by
/// the GPU count.
pub const MAX_TOTAL_GPUS: GpuCount = 1 << 20;

/// A homogeneous GPU cluster: `nodes` × `gpus_per_node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    /// Number of nodes.
    pub nodes: u32,
    /// GPUs on each node.
    pub gpus_per_node: GpuCount,
}

impl Cluster {
    /// A validated cluster.
    pub fn new(nodes: u32, gpus_per_node: GpuCount) -> Result<Self> {
        let cluster = Cluster {
            nodes,
            gpus_per_node,
        };
        cluster.validate()?;
        Ok(cluster)
    }

    /// Checks that both dimensions are positive and the total fits the allocator's index type.
    pub fn validate(&self) -> Result<()> {
        if self.nodes == 0 {
            return Err(CoreError::InvalidCluster {
                field: "nodes".into(),
                reason: "must be at least 1".into(),
            });
        }
        if self.gpus_per_node == 0 {
            return Err(CoreError::InvalidCluster {
                field: "gpus_per_node".into(),
                reason: "must be at least 1".into(),
            });
        }
        if u64::from(self.nodes) * u64::from(self.gpus_per_node) > u64::from(MAX_TOTAL_GPUS) {
            return Err(CoreError::InvalidCluster {
                field: "nodes".into(),
                reason: "more than 1,048,576 GPUs in total is not supported".into(),
            });
        }
        Ok(())
    }

    /// Total GPUs in the cluster.
    pub fn total_gpus(&self) -> GpuCount {
        self.nodes * self.gpus_per_node
    }

    /// Fewest nodes that can hold `gpus` GPUs (consolidated placement).
    pub fn min_nodes_for(&self, gpus: GpuCount) -> u32 {
        gpus.div_ceil(self.gpus_per_node).max(1)
    }
}
