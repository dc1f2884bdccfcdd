"""``job.loader(dataset, **DataLoader kwargs)``: a ``torch.utils.data.DataLoader`` that yields this
rank's share of each global batch of the job's sample stream (``ElasticSampler``), follows a batch
changed in place at the step it takes effect, and resumes at the exact sample.

The DataLoader is a real one (workers, ``pin_memory``, ``collate_fn``, ``prefetch_factor``,
``persistent_workers``): only its ``batch_sampler`` is dlscale's. Its workers prefetch batches
cut with the sizes of the moment, so when the job's batch, world size or position changes the
loader starts a new iterator at the first sample nobody has trained on yet; the batches already
handed out (a framework may fetch one ahead) are trained as they are, and counted with their own
size.
"""
from __future__ import annotations

import atexit
import hashlib
import signal
import weakref
from typing import Any, Callable, Iterator, List, Optional

from .sampler import ElasticSampler

# DataLoader arguments the loader sets itself: the batches are the job's.
_CHOSEN_BY_THE_JOB = ("batch_size", "shuffle", "sampler", "batch_sampler", "drop_last")

# The loaders alive, closed at exit before multiprocessing ends its children: its atexit handler,
# registered when it was imported and so run after this one, terminates daemonic children and
# joins them, and workers that ignore SIGTERM (``IgnoreStopSignals``) would never be joined.
_LIVE: "weakref.WeakSet[ElasticLoader]" = weakref.WeakSet()


def _close_all() -> None:
    for loader in list(_LIVE):
        loader.close()


class IgnoreStopSignals:
    """A DataLoader ``worker_init_fn`` that makes its worker ignore SIGTERM and SIGINT, then calls
    the user's own. A launcher signals the whole process group (Slurm, torchrun, dlscale's local
    executor, Ctrl-C in a terminal); a worker that died of it would fail the main process's next
    batch before its checkpoint. The main process stops at its next step and ends its workers
    itself; a SIGKILL still ends them all. A class, not a closure: spawned workers pickle it."""

    def __init__(self, user_init: Optional[Callable[[int], None]]) -> None:
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if self.user_init is not None:
            self.user_init(worker_id)


def worker_seed(seed: int, rank: int, position: int) -> int:
    """The seed of the DataLoader iterator rank ``rank`` starts at stream ``position`` (its
    workers' base seed is drawn from it): apart for every rank and position."""
    digest = hashlib.blake2b(f"{seed}:{rank}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # manual_seed takes up to 2**63 - 1 here


class StreamBatches:
    """A DataLoader ``batch_sampler``: this rank's indices of the consecutive global batches of
    ``batch_size`` samples from stream position ``start`` until ``end``; its ``local_batch_size``
    slice of each is the one at offset ``rank * local_batch_size``. The loader sets the fields
    before it starts each iterator (the DataLoader calls ``iter()`` on it in the main process)."""

    def __init__(self, sampler: ElasticSampler) -> None:
        self.sampler = sampler
        self.start = 0
        self.end = 0
        self.batch_size = 1
        self.local_batch_size = 1
        self.rank = 0

    def indices(self, position: int) -> List[int]:
        """This rank's dataset indices of the global batch that starts at ``position``."""
        return self.sampler.stream(position + self.rank * self.local_batch_size, self.local_batch_size)

    def __iter__(self) -> Iterator[List[int]]:
        position = self.start
        while position < self.end:
            yield self.indices(position)
            position += self.batch_size

    def __len__(self) -> int:
        return max(0, -(-(self.end - self.start) // self.batch_size))


class ElasticLoader:
    """Iterating it is one pass: from the job's next untrained sample to the end of that sample's
    epoch (the stream runs on across epochs; the last batch of a pass may take its first samples
    of the next epoch), so ``for epoch in ...: for batch in loader:`` works, and so does a loop that
    counts steps. ``len(loader)`` is the batches left in the pass at the current sizes. Each batch
    handed out is recorded with the job, whose ``step_done()`` counts it with its own size."""

    def __init__(self, job: Any, dataset: Any, *, seed: int = 0, shuffle: bool = True, **kwargs: Any) -> None:
        chosen = [name for name in _CHOSEN_BY_THE_JOB if name in kwargs]
        if chosen:
            raise ValueError(f"job.loader() cuts the batches from the job's allocation: drop "
                             f"{', '.join(chosen)} (the order is the job's too: seed=, shuffle=)")
        if not kwargs.get("in_order", True):
            # Batches out of order: the job counts what it handed out in stream order, so a
            # resume or a rebatch would serve a batch trained out of turn again and skip another.
            raise ValueError("job.loader() hands out the job's batches in stream order: drop "
                             "in_order=False")
        from torch.utils.data import DataLoader, IterableDataset

        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            raise TypeError(f"job.loader() needs a map-style dataset (__len__ and __getitem__) to cut "
                            f"the job's sample stream from; {type(dataset).__name__} has no length")
        self.job = job
        self.num_samples = len(dataset)
        if self.num_samples < 1:
            raise ValueError(f"job.loader(): the dataset ({type(dataset).__name__}) is empty")
        self.sampler = ElasticSampler(self.num_samples, seed=seed, shuffle=shuffle)
        self.batches = StreamBatches(self.sampler)
        kwargs["worker_init_fn"] = IgnoreStopSignals(kwargs.get("worker_init_fn"))
        self.seed = seed
        # The generator each new iterator draws its workers' base seed from: the loader's own,
        # reseeded at each start (``_restart``), unless the caller gave one.
        self._generator: Any = None
        if kwargs.get("generator") is None:
            import torch

            # Not the global RNG: drawing from it would shift the draws (dropout, augmentation)
            # of a resumed run off those of a run never stopped.
            self._generator = kwargs["generator"] = torch.Generator()
        self.dataloader = DataLoader(dataset, batch_sampler=self.batches, **kwargs)
        self._iterator: Optional[Iterator[Any]] = None
        self._pass_end: Optional[int] = None  # the stream position the running pass ends at
        # Registered now, after the DataLoader's import has imported multiprocessing: run before
        # it. Once: a registration is replaced, not added to.
        atexit.unregister(_close_all)
        atexit.register(_close_all)
        _LIVE.add(self)

    def close(self) -> None:
        """End the current iterator: its workers finish and are joined (the next pass starts
        new ones)."""
        iterator, self._iterator = self._iterator, None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        if iterator is not None and getattr(self.dataloader, "_iterator", None) is iterator:
            # Persistent workers: the DataLoader would reuse the iterator just shut down.
            self.dataloader._iterator = None

    @property
    def epoch(self) -> int:
        """The epoch of the next sample to be handed out."""
        return self.job.next_stream_position() // self.num_samples

    def __len__(self) -> int:
        position = self.job.next_stream_position()
        end = (position // self.num_samples + 1) * self.num_samples
        return -(-(end - position) // self.job.batch_size)

    def batches_left(self) -> int:
        """The batches the running pass has left to hand out, at the job's sizes of now (0 when
        no pass runs): what a framework that counted a pass's batches when it started (Lightning)
        must count after a rebatch."""
        if self._pass_end is None:
            return 0
        return max(0, -(-(self._pass_end - self.job.next_stream_position()) // self.job.batch_size))

    def _restart(self, position: int, end: int) -> None:
        b = self.batches
        b.start, b.end = position, end
        b.batch_size, b.local_batch_size, b.rank = (self.job.batch_size, self.job.local_batch_size,
                                                    self.job.rank)
        if self._generator is not None:
            # The workers' seeds from the rank and where they start: seeded alike, every rank's
            # workers would draw the same augmentations, and every relaunch those its first
            # launch drew from its start. Reproducible: a resume from one checkpoint draws alike.
            self._generator.manual_seed(worker_seed(self.seed, self.job.rank, position))
        # A new iterator: persistent workers are kept, and what the old one prefetched is dropped.
        self._iterator = iter(self.dataloader)

    def _current(self, position: int) -> bool:
        b, job = self.batches, self.job
        return (self._iterator is not None and position == job.next_stream_position()
                and (b.batch_size, b.local_batch_size, b.rank) == (job.batch_size, job.local_batch_size,
                                                                    job.rank))

    def __iter__(self) -> Iterator[Any]:
        job = self.job
        job.forget_handed()  # what an earlier pass handed out and no step counted was not trained
        position = job.next_stream_position()
        end = (position // self.num_samples + 1) * self.num_samples
        self._iterator = None
        self._pass_end = end
        while position < end:
            if not self._current(position):
                # A rebatch, a resume or a step counted with other samples: start again at the
                # first sample nobody has, with the job's sizes of now.
                position = job.next_stream_position()
                if position >= end:
                    break
                self._restart(position, end)
            batch = next(self._iterator)
            job.handed_out(position, self.batches)
            position += self.batches.batch_size
            yield batch
