"""The device the worker library's own collectives (resume agreement, stop agreement, noise
averaging) put their tensors on: CUDA under NCCL, which reduces nothing else, the CPU otherwise."""
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from dlscale.collective import collective_device  # noqa: E402


def test_nccl_reduces_on_the_current_cuda_device(monkeypatch):
    seen = []
    monkeypatch.setattr(dist, "get_backend", lambda group=None: seen.append(group) or "nccl")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    marker = object()
    assert collective_device() == "cuda:3"
    assert collective_device(marker) == "cuda:3"
    assert seen == [None, marker], "the backend is asked of the group reduced over"


@pytest.mark.skipif(not dist.is_available(), reason="this torch has no torch.distributed")
def test_other_backends_reduce_on_the_cpu(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert collective_device() == "cpu"
        assert collective_device(dist.group.WORLD) == "cpu"
    finally:
        dist.destroy_process_group()
