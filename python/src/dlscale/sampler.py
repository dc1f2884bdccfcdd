"""Deterministic, resumable data order that survives changes of world size and batch size.

The data is seen as one endless stream: epoch ``e`` is a permutation of ``range(n)`` seeded by
``seed * 1_000_003 + e`` (seeds one apart never share an epoch's order), and the epochs are
concatenated. The only training-loop state is the stream
position ``samples_seen``. A step with global batch ``B`` consumes stream positions
``[samples_seen, samples_seen + B)``; worker ``r`` of the group takes the contiguous slice
``[samples_seen + r*b, samples_seen + (r+1)*b)`` where ``b`` is its local batch. After a
rescale the new group simply continues at the checkpointed ``samples_seen``: no sample is
skipped or repeated, whatever the new world size or batch.
"""
from __future__ import annotations

import random
from typing import Dict, List


def _torch():
    """torch, where it is installed; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


class ElasticSampler:
    def __init__(self, num_samples: int, seed: int = 0, shuffle: bool = True, cache_epochs: int = 2):
        if num_samples < 1:
            raise ValueError("num_samples must be >= 1")
        self.num_samples = num_samples
        self.seed = seed
        self.shuffle = shuffle
        self._cache: Dict[int, List[int]] = {}
        self._cache_epochs = max(1, cache_epochs)

    def permutation(self, epoch: int) -> List[int]:
        """Epoch ``epoch``'s order: the same for every launch of a job in one environment (drawn
        with torch's CPU ``randperm``, a C loop, where torch is installed, else with Python's
        ``random``, a hundred times slower: a tiny dataset's epochs would cost a visible share of
        its steps)."""
        perm = self._cache.get(epoch)
        if perm is None:
            key = self.seed * 1_000_003 + epoch
            if not self.shuffle:
                perm = list(range(self.num_samples))
            elif _torch() is not None:
                torch = _torch()
                perm = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(key)).tolist()
            else:
                perm = list(range(self.num_samples))
                random.Random(key).shuffle(perm)
            if len(self._cache) >= self._cache_epochs:
                self._cache.pop(min(self._cache))
            self._cache[epoch] = perm
        return perm

    def epoch_of(self, position: int) -> int:
        return position // self.num_samples

    def stream(self, start: int, count: int) -> List[int]:
        """Dataset indices at stream positions ``[start, start + count)``."""
        if start < 0 or count < 0:
            raise ValueError("start and count must be >= 0")
        out: List[int] = []
        pos, end = start, start + count
        while pos < end:
            epoch, off = divmod(pos, self.num_samples)
            take = min(end - pos, self.num_samples - off)
            out.extend(self.permutation(epoch)[off : off + take])
            pos += take
        return out

    def local_indices(self, samples_seen: int, local_batch: int, rank: int) -> List[int]:
        """This worker's indices for the step that starts at stream position ``samples_seen``
        (with every worker using the same ``local_batch``)."""
        return self.stream(samples_seen + rank * local_batch, local_batch)

    def global_indices(self, samples_seen: int, batch: int) -> List[int]:
        return self.stream(samples_seen, batch)
