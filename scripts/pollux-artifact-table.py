#!/usr/bin/env python3
"""Generates crates/dlscale-core/data/pollux/artifact-large-placements.csv: the step and sync
times Pollux's artifact simulator uses for placements over 5 or more nodes.

For those placements the artifact interpolates linearly over (nodes, replicas, local batch) with
SciPy's LinearNDInterpolator on a degenerate triangulation, so its values cannot be re-derived
with another interpolator; dlscale ships the artifact's own point evaluations instead. This script
imports the artifact's `applications.py` at run time and calls its `get_throughput` once per
point (as its simulator does); it contains none of the artifact's code.

Points: every (nodes 5..16, replicas, local batch) that the fixed-batch baselines (Tiresias,
Optimus+Oracle) reach on the bundled workloads at every load (local batch from the artifact's
batch and accumulation rule, as dlscale's `pollux_artifact` module computes it), plus a grid for
other policies (every measured local batch of `placements.csv`, every replica count the nodes can
hold). Points outside the data's convex hull (NaN) are left out.

Usage (Python 3.8+ with the artifact's requirements: numpy 1.23, pandas 1.5, scipy 1.10):
    git -C <adaptdl clone> archive osdi21-artifact simulator | tar -x -C /tmp/pollux-art
    python3 scripts/pollux-artifact-table.py /tmp/pollux-art/simulator <workloads dir>... \
        > crates/dlscale-core/data/pollux/artifact-large-placements.csv
with the workloads dirs of the artifact (`workloads`, `workloads-0.5`, `workloads-1.5`,
`workloads-2.0`, also in ../shared/data/pollux/).
"""
import csv
import glob
import math
import os
import sys
import warnings

warnings.filterwarnings("ignore")


def micro_batches(app, batch, replicas, always_split):
    """(per-GPU micro-batch, extra accumulation steps) of `batch` on `replicas` (rule C2)."""
    local = math.ceil(batch / replicas - 1e-8)
    accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
    if replicas == 1 and (always_split or batch > app.init_batch_size):
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    return min(atomic, int(app.max_batch_size / (replicas * (accum + 1))))


def spread(nodes, replicas):
    """Some placement tuple of `replicas` GPUs over `nodes` nodes of 4 GPUs."""
    base, extra = divmod(replicas, nodes)
    return tuple(base + (1 if i < extra else 0) for i in range(nodes))


def main():
    simulator_dir, workload_dirs = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, simulator_dir)
    import applications  # the artifact's own module
    from applications import APPLICATIONS

    # Its get_throughput builds a LinearNDInterpolator (a Delaunay triangulation) per call; the
    # triangulation of the same data is the same every time, so build it once per data set.
    built = {}
    make = applications.LinearNDInterpolator

    def cached(points, values):
        key = (points.tobytes(), values.tobytes())
        if key not in built:
            built[key] = make(points, values)
        return built[key]

    applications.LinearNDInterpolator = cached

    pairs = set()
    for d in workload_dirs:
        for path in glob.glob(os.path.join(d, "*.csv")):
            with open(path) as f:
                for row in csv.DictReader(f):
                    pairs.add((row["application"], int(row["batch_size"])))
    points = {name: set() for name in APPLICATIONS}
    for name, batch in sorted(pairs):
        app = APPLICATIONS[name]
        for r in range(5, 65):
            for split in (False, True):
                atomic = micro_batches(app, batch, r, split)
                for n in range(5, min(r, 16) + 1):
                    if r <= 4 * n:
                        points[name].add((n, r, atomic))
    for name, app in APPLICATIONS.items():
        grid = sorted(set(int(x) for x in app.placements.local_bsz.values))
        for n in range(5, 17):
            for r in range(n, min(4 * n, 64) + 1):
                for atomic in grid:
                    points[name].add((n, r, atomic))
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["model", "nodes", "replicas", "local_bsz", "step_time", "sync_time"])
    for name in sorted(points):
        app = APPLICATIONS[name]
        for n, r, atomic in sorted(points[name]):
            try:
                step, sync = app.get_throughput(spread(n, r), atomic)
            except AssertionError:  # outside the convex hull: NaN
                continue
            out.writerow([name, n, r, atomic, repr(float(step)), repr(float(sync))])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
