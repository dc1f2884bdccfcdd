"""Atomic checkpoints in a directory: ``step-0000000123.pt`` files, and ``step-0000000123.dcp``
directories for sharded models (``torch.distributed.checkpoint``: each rank writes its shards).

A file is written as ``.step-….pt.tmp-<pid>``, fsynced, then ``os.replace``d into place; a sharded
checkpoint is written by every rank into ``.step-….dcp.tmp`` and renamed into place by rank 0 once
all have written. A reader only ever sees complete checkpoints. The newest ``keep`` are kept.
torch is imported lazily here.

``DirectoryStore`` is what ``Job`` saves to and resumes from by default; a job under another
framework's checkpoint API (Ray Train: ``dlscale.ray_train.RayTrainStore``) gives ``Job`` a store
of the same shape instead.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import sys
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

_NAME = re.compile(r"^step-(\d{10})\.(pt|dcp)$")
FORMAT_VERSION = 1
SHARDED = ".dcp"  # the ending of a sharded checkpoint's directory


def checkpoint_path(directory: str, step: int, sharded: bool = False) -> str:
    return os.path.join(directory, f"step-{step:010d}{SHARDED if sharded else '.pt'}")


def list_checkpoints(directory: str) -> List[Tuple[int, str]]:
    """(step, path) of complete checkpoints, files and sharded directories, newest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = _NAME.match(name)
        if m:
            found.append((int(m.group(1)), os.path.join(directory, name)))
    found.sort(reverse=True)
    return found


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(directory: str, step: int, state: Dict[str, Any], keep: int = 2) -> str:
    """Write ``state`` as the checkpoint for ``step`` atomically; prune to the newest ``keep``."""
    import torch

    os.makedirs(directory, exist_ok=True)
    final = checkpoint_path(directory, step)
    tmp = os.path.join(directory, f".{os.path.basename(final)}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        check_loadable(tmp)
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    _prune(directory, keep, step)
    return final


class UnloadableCheckpoint(RuntimeError):
    """A checkpoint's state holds what a resume could not load back (its loader takes tensors,
    numbers, strings and containers of them only): refused when saved, not found at a relaunch."""


def check_loadable(path: str) -> None:
    """Raise ``UnloadableCheckpoint`` unless the file at ``path`` loads as a resume loads it
    (``weights_only``), its tensors memory-mapped rather than read."""
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:
        raise UnloadableCheckpoint(
            "dlscale: this checkpoint could not be loaded back by a resume (the state of the "
            "objects given to resume() and job.extra must be tensors, numbers, strings, lists, "
            "tuples and dicts of them; a numpy value: use .item() or torch.tensor): "
            f"{exc}") from exc


def _prune(directory: str, keep: int, saved_step: int) -> None:
    """Remove all but the newest ``keep`` checkpoints (at least one), and every checkpoint of a
    step beyond ``saved_step``, the one just saved: a later step's is from a run this one did not
    resume (it could not be loaded), which would otherwise outrank every new checkpoint."""
    found = list_checkpoints(directory)  # newest first
    beyond = [path for step, path in found if step > saved_step]
    kept = [path for step, path in found if step <= saved_step]
    for old in beyond + kept[max(1, keep):]:
        try:
            if old.endswith(SHARDED):
                shutil.rmtree(old)
            else:
                os.unlink(old)
        except OSError:
            pass


def save_sharded_checkpoint(directory: str, step: int, state: Dict[str, Any], keep: int = 2) -> str:
    """Write ``state`` (a sharded model's and optimizer's state dicts, and more) as the sharded
    checkpoint for ``step`` with ``torch.distributed.checkpoint``: every rank its own shards, into
    a temporary directory that rank 0 renames into place once every rank has written; prunes to
    the newest ``keep``. Collective: every rank calls it at the same step."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    chief = dist.get_rank() == 0
    final = checkpoint_path(directory, step, sharded=True)
    tmp = os.path.join(directory, f".{os.path.basename(final)}.tmp")
    if chief:
        os.makedirs(directory, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # what a writer that died left
    dist.barrier()
    dcp.save(state, checkpoint_id=tmp)  # its files fsynced; the metadata, rank 0's, last
    dist.barrier()
    if chief:
        shutil.rmtree(final, ignore_errors=True)  # the same step saved again
        os.replace(tmp, final)
        _fsync_dir(directory)
        _prune(directory, keep, step)
    dist.barrier()
    return final


def sharded_checkpoint_keys(path: str) -> Set[str]:
    """The names of the values the sharded checkpoint at ``path`` holds: a state's keys joined by
    dots (``objects.scheduler``; a dict's values each under its own: ``model.0.weight``)."""
    import torch.distributed.checkpoint as dcp

    return set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)


def load_sharded_checkpoint(path: str, state: Dict[str, Any]) -> None:
    """Load the sharded checkpoint at ``path`` into ``state`` (in place: its tensors are filled,
    its other values replaced), resharded to this group: every value ``state`` names must be
    there (``sharded_checkpoint_keys``). Collective."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, checkpoint_id=path)


def pack_state(value: Any, what: str = "job.extra") -> bytes:
    """``value`` (tensors, numbers, strings and containers of them) as one bytes value: what a
    sharded checkpoint holds for a state whose keys a resume cannot know in advance (its loader
    fills a template's keys only: a dict of the user's keys, a list that grew). Raises
    ``UnloadableCheckpoint`` for what a resume could not load back (``what`` names it)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(value, buffer)
    packed = buffer.getvalue()
    try:
        unpack_state(packed)
    except Exception as exc:
        raise UnloadableCheckpoint(
            f"dlscale: {what} could not be loaded back by a resume (it must hold tensors, "
            f"numbers, strings, lists, tuples and dicts of them): {exc}") from exc
    return packed


def holds_dtensor(value: Any) -> bool:
    """Whether ``value`` (a state dict) holds a DTensor anywhere: a sharded state, which a
    sharded checkpoint keeps as shards rather than packed."""
    if type(value).__name__ == "DTensor":
        return True
    if isinstance(value, dict):
        return any(holds_dtensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(holds_dtensor(v) for v in value)
    return False


def unpack_state(packed: bytes) -> Any:
    """What ``pack_state`` packed (loaded as a resume loads a checkpoint: ``weights_only``)."""
    import io

    import torch

    return torch.load(io.BytesIO(packed), map_location="cpu", weights_only=True)


def load_latest_checkpoint(directory: Optional[str], sharded: bool = False
                           ) -> Optional[Tuple[str, Optional[Dict[str, Any]]]]:
    """(path, state) of the newest loadable checkpoint file in ``directory``, or None when it
    holds none. A damaged file falls back to the one before it; when there are checkpoint files
    and none loads, ``UnloadableCheckpoint`` says why, rather than a silent start from step 0
    that would train everything again.

    A sharded checkpoint (``.dcp``) newer than any file that loads is never passed over (its
    steps would be trained again, and the next save's pruning would delete it): with ``sharded``
    it is returned as ``(path, None)``, for ``Job.resume`` to load (only it has the objects its
    loader fills); without, ``UnloadableCheckpoint`` names it."""
    if not directory:
        return None
    import torch

    failures = []
    for _, path in list_checkpoints(directory):
        if path.endswith(SHARDED):
            if sharded:
                return path, None
            raise UnloadableCheckpoint(
                f"dlscale: the newest checkpoint in {directory} that may load is the sharded "
                f"{path}: Job.resume loads it" + "".join(f"; {f}" for f in failures))
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a damaged file: fall back to the previous one
            print(f"dlscale: warning: cannot load checkpoint {path}: {exc}", file=sys.stderr, flush=True)
            failures.append(f"{path}: {exc}")
            continue
        if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
            print(f"dlscale: warning: {path} is not a dlscale checkpoint", file=sys.stderr, flush=True)
            failures.append(f"{path}: not a dlscale checkpoint")
            continue
        return path, state
    if failures:
        raise UnloadableCheckpoint(
            "dlscale: no checkpoint in " + directory + " can be loaded: " + "; ".join(failures))
    return None


def capture_rng_state() -> Dict[str, Any]:
    import torch

    state: Dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    np = sys.modules.get("numpy")
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = (name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def plain_rng_state(state: Dict[str, Any]) -> Dict[str, Any]:
    """``state`` (``capture_rng_state``'s) without tensors: lists of byte values instead. One
    object to a sharded checkpoint, whatever the world size that wrote it."""
    plain = dict(state)
    if "torch" in plain:
        plain["torch"] = plain["torch"].tolist()
    if "cuda" in plain:
        plain["cuda"] = [t.tolist() for t in plain["cuda"]]
    return plain


def restore_rng_state(state: Dict[str, Any]) -> None:
    import torch

    def tensor(value: Any) -> Any:
        return value if isinstance(value, torch.Tensor) else torch.tensor(value, dtype=torch.uint8)

    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "torch" in state:
        torch.set_rng_state(tensor(state["torch"]))
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in state:
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        try:
            torch.cuda.set_rng_state_all([tensor(t) for t in state["cuda"]])
        except Exception:
            pass


def restore_rank_rng_state(by_rank: List[Dict[str, Any]], rank: int) -> None:
    """Restore rank ``rank``'s generators from a checkpoint's states of every rank that wrote it
    (``by_rank``, rank 0's first): its own where that run had the rank; else, a rank the run
    did not have, streams of its own seeded from rank 0's state and the rank, so that no two
    ranks draw alike (dropout, augmentation) and a resume draws as the one before it did."""
    if rank < len(by_rank):
        restore_rng_state(by_rank[rank])
        return
    import torch

    internal = by_rank[0].get("python")
    source = random.Random()
    if internal is not None:
        version, state, gauss = internal
        source.setstate((version, tuple(state), gauss))
    seed = source.getrandbits(64) ^ (rank * 0x9E3779B97F4A7C15 % 2**64)
    random.seed(seed)
    torch.manual_seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


class DirectoryStore:
    """Checkpoints as ``step-<10 digits>.pt`` files (``.dcp`` directories for sharded models) in
    ``directory`` (``DLSCALE_CHECKPOINT_DIR``), the newest ``keep`` kept: ``Job``'s default store.

    A store is what ``Job`` needs of checkpoint storage: ``load_latest()`` (every rank, at
    ``resume``: ``(where, state)`` of the newest checkpoint or None; ``state`` None for a sharded
    checkpoint at ``where``, which ``Job`` loads) and ``save(step, state, chief=)`` (every rank at
    the same step; ``state()`` builds the state where it is needed, rank 0 only for an unsharded
    model). ``sharded``: whether it holds sharded (DCP) checkpoints too."""

    sharded = True

    def __init__(self, directory: str, keep: int = 2) -> None:
        self.directory = directory
        self.keep = keep

    def __str__(self) -> str:
        return self.directory

    def load_latest(self) -> Optional[Tuple[str, Optional[Dict[str, Any]]]]:
        """(path, state) of the newest checkpoint of either kind; state None for a sharded one
        (``Job`` loads it: its loader fills the state of the objects it is given)."""
        return load_latest_checkpoint(self.directory, sharded=True)

    def list(self) -> List[Tuple[int, str]]:
        return list_checkpoints(self.directory)

    def save(self, step: int, state: Callable[[], Dict[str, Any]], *, chief: bool,
             sharded: bool = False) -> Optional[str]:
        """Rank 0 writes an unsharded checkpoint (the others return None); every rank writes its
        shards of a sharded one (a collective)."""
        if sharded:
            return save_sharded_checkpoint(self.directory, step, state(), keep=self.keep)
        if chief:
            return save_checkpoint(self.directory, step, state(), keep=self.keep)
        return None
