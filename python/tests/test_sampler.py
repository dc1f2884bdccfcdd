import pytest

from dlscale import ElasticSampler


def test_each_epoch_is_a_permutation_and_epochs_differ():
    s = ElasticSampler(100, seed=3)
    e0, e1 = s.stream(0, 100), s.stream(100, 100)
    assert sorted(e0) == list(range(100)) and sorted(e1) == list(range(100))
    assert e0 != e1


def test_deterministic_across_instances():
    assert ElasticSampler(50, seed=1).stream(30, 200) == ElasticSampler(50, seed=1).stream(30, 200)
    assert ElasticSampler(50, seed=1).stream(0, 50) != ElasticSampler(50, seed=2).stream(0, 50)


def test_ranks_partition_the_global_batch():
    s = ElasticSampler(37, seed=0)
    for pos in (0, 10, 36, 70):
        parts = [s.local_indices(pos, 8, r) for r in range(4)]
        assert sum(parts, []) == s.global_indices(pos, 32)


def test_stream_is_independent_of_batch_and_world_changes():
    """Consuming the stream with changing (world, local batch) yields exactly the stream."""
    s = ElasticSampler(101, seed=9)
    pos, got = 0, []
    for world, local, steps in [(1, 32, 5), (2, 16, 7), (4, 48, 3), (3, 5, 11)]:
        for _ in range(steps):
            for rank in range(world):
                got.extend(s.local_indices(pos, local, rank))
            pos += world * local
    assert got == ElasticSampler(101, seed=9).stream(0, pos)


def test_no_shuffle():
    assert ElasticSampler(5, shuffle=False).stream(3, 6) == [3, 4, 0, 1, 2, 3]


def test_rejects_bad_args():
    with pytest.raises(ValueError):
        ElasticSampler(0)
    with pytest.raises(ValueError):
        ElasticSampler(5).stream(-1, 2)
