"""The allocation a dlscale worker runs with, read from the environment.

dlscale (the scheduler) sets ``DLSCALE_*``; torchrun sets ``RANK``/``LOCAL_RANK``/``WORLD_SIZE``.
All values are validated here so that a malformed allocation fails at start with one clear
message instead of deep inside a training step.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Mapping, Optional
from urllib.parse import urlparse


class EnvError(ValueError):
    """A DLSCALE_* / torchrun environment variable is malformed or inconsistent."""


def _int(env: Mapping[str, str], name: str, *, minimum: int) -> Optional[int]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise EnvError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise EnvError(f"{name}={value} must be >= {minimum}")
    return value


def _str(env: Mapping[str, str], name: str) -> Optional[str]:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    return raw.strip()


@dataclass(frozen=True)
class Allocation:
    """What this worker was given. ``batch_size`` is the global batch (all workers, one step)."""

    job_id: Optional[str]
    rank: int
    local_rank: int
    world_size: int
    local_batch_size: int
    batch_size: int
    checkpoint_dir: Optional[str]
    api: Optional[str]
    token: Optional[str]
    # What the scheduler asked for, when it differs from what torchrun actually formed.
    requested_world_size: Optional[int] = None
    # The launch number dlscale gave this run (``DLSCALE_ATTEMPT``): sent with every report so
    # the server can tell an old launch still exiting from the current one.
    attempt: Optional[int] = None
    # Gradient accumulation (``DLSCALE_ACCUM_STEPS``, default 1): run each step's
    # ``local_batch_size`` samples as this many micro-batches (``micro_batch_size`` each, the last
    # possibly smaller), backward on each, and step the optimizer (all-reduce) once.
    accum_steps: int = 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def micro_batch_size(self) -> int:
        """Samples per micro-batch: ``ceil(local_batch_size / accum_steps)``."""
        return -(-self.local_batch_size // self.accum_steps)

    @classmethod
    def from_env(
        cls,
        environ: Optional[Mapping[str, str]] = None,
        *,
        default_local_batch_size: int = 32,
    ) -> "Allocation":
        """Read and validate the allocation.

        * world size: torchrun's ``WORLD_SIZE`` if set (that is the group that really exists),
          else ``DLSCALE_WORLD_SIZE``, else 1. If both are set and differ, a warning is printed
          and ``WORLD_SIZE`` wins.
        * per-worker batch: ``DLSCALE_LOCAL_BATCH_SIZE``; else ``DLSCALE_BATCH_SIZE / world``
          (must divide); else ``default_local_batch_size``.
        * global batch: ``local_batch_size * world_size``; a given ``DLSCALE_BATCH_SIZE`` must
          agree with it.
        """
        env = os.environ if environ is None else environ

        torch_world = _int(env, "WORLD_SIZE", minimum=1)
        dl_world = _int(env, "DLSCALE_WORLD_SIZE", minimum=1)
        world = torch_world or dl_world or 1
        if torch_world is not None and dl_world is not None and torch_world != dl_world:
            print(
                f"dlscale: warning: torchrun WORLD_SIZE={torch_world} differs from "
                f"DLSCALE_WORLD_SIZE={dl_world}; using {torch_world}",
                file=sys.stderr,
                flush=True,
            )
        rank = _int(env, "RANK", minimum=0) or 0
        local_rank = _int(env, "LOCAL_RANK", minimum=0) or 0
        if rank >= world:
            raise EnvError(f"RANK={rank} must be < world size {world}")

        global_batch = _int(env, "DLSCALE_BATCH_SIZE", minimum=1)
        local_batch = _int(env, "DLSCALE_LOCAL_BATCH_SIZE", minimum=1)
        if local_batch is None:
            if global_batch is not None:
                if global_batch % world != 0:
                    raise EnvError(
                        f"DLSCALE_BATCH_SIZE={global_batch} is not divisible by world size "
                        f"{world}; set DLSCALE_LOCAL_BATCH_SIZE"
                    )
                local_batch = global_batch // world
            else:
                if default_local_batch_size < 1:
                    raise EnvError("default_local_batch_size must be >= 1")
                local_batch = default_local_batch_size
        if global_batch is not None and global_batch != local_batch * world:
            # Under an elastic torchrun the group may have formed with fewer/more workers than
            # dlscale asked for; then the per-worker batch is what the worker gets and the
            # effective global batch follows from it.
            if torch_world is not None and dl_world is not None and torch_world != dl_world:
                print(
                    f"dlscale: warning: DLSCALE_BATCH_SIZE={global_batch} but "
                    f"{local_batch} x {world} workers = {local_batch * world}; using "
                    f"{local_batch * world}",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                raise EnvError(
                    f"DLSCALE_BATCH_SIZE={global_batch} != DLSCALE_LOCAL_BATCH_SIZE={local_batch} "
                    f"x world size {world}"
                )

        api = _str(env, "DLSCALE_API")
        if api is not None:
            parsed = urlparse(api)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise EnvError(f"DLSCALE_API={api!r} must be an http:// or https:// base URL")
            api = api.rstrip("/")
        job_id = _str(env, "DLSCALE_JOB_ID")
        if api is not None and job_id is None:
            raise EnvError("DLSCALE_API is set but DLSCALE_JOB_ID is not")
        token = _str(env, "DLSCALE_TOKEN")
        token_file = _str(env, "DLSCALE_TOKEN_FILE")
        if token is None and token_file is not None:
            # Where an engine shows a job's environment to others (Ray's dashboard), the server
            # gives the token as a file of the job's own instead.
            try:
                with open(token_file, encoding="utf-8") as f:
                    token = f.read().rstrip("\n") or None
            except (OSError, UnicodeDecodeError) as exc:
                raise EnvError(f"DLSCALE_TOKEN_FILE={token_file!r} cannot be read: {exc}") from exc
        if token is not None and any(c in token for c in "\r\n"):
            raise EnvError("DLSCALE_TOKEN must not contain newlines")

        return cls(
            job_id=job_id,
            rank=rank,
            local_rank=local_rank,
            world_size=world,
            local_batch_size=local_batch,
            batch_size=local_batch * world,
            checkpoint_dir=_str(env, "DLSCALE_CHECKPOINT_DIR"),
            api=api,
            token=token,
            requested_world_size=dl_world,
            attempt=_int(env, "DLSCALE_ATTEMPT", minimum=0),
            accum_steps=_int(env, "DLSCALE_ACCUM_STEPS", minimum=1) or 1,
        )
