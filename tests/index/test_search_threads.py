"""A few queries search on one OpenMP thread where the work is small (`local_store.search_threads`);
large batches and large exact scans keep faiss's threads, and the caller's setting comes back."""

from __future__ import annotations

import threading

import pytest

from embedkit.index.local_store import SERIAL_SCAN_BYTES, search_threads

faiss = pytest.importorskip("faiss")


class Seen:
    """A stand-in index: its size, and the threads faiss would use when it is searched."""

    def __init__(self, ntotal: int, d: int, code_size: int | None = None) -> None:
        self.ntotal, self.d = ntotal, d
        if code_size is not None:
            self.code_size = code_size


@pytest.fixture
def two_threads():
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    yield
    faiss.omp_set_num_threads(before)


@pytest.mark.parametrize(
    ("index", "kind", "queries", "inside"),
    [
        (Seen(4000, 384, 48), "flat", 1, 1),  # a small binary scan: one thread
        (Seen(1_000_000, 384, 48), "flat", 1, 1),  # 48 MB of codes: one thread
        (Seen(1_000_000, 384, 384), "flat", 1, 2),  # 384 MB of int8 codes: faiss's threads
        (Seen(1_000_000, 384), "flat", 1, 2),  # float32 without code_size: 4 bytes a dimension
        (Seen(1_000_000, 384), "hnsw", 3, 1),  # a graph visits few vectors whatever its size
        (Seen(4000, 384, 48), "flat", 20, 2),  # a batch: faiss splits it over the queries
    ],
)
def test_one_thread_only_for_small_work(two_threads, index, kind, queries, inside):
    with search_threads(index, kind, queries):
        assert faiss.omp_get_max_threads() == inside
    assert faiss.omp_get_max_threads() == 2
    assert SERIAL_SCAN_BYTES == 64 * 2**20  # the sizes above straddle it: 48 MB and 384 MB


def test_the_setting_is_the_calling_threads_own(two_threads):
    """A server's concurrent searches: one thread's serial search leaves another's threads alone."""
    inside, other = threading.Event(), []

    def elsewhere() -> None:
        inside.wait(5)
        other.append(faiss.omp_get_max_threads())

    worker = threading.Thread(target=elsewhere)
    worker.start()
    with search_threads(Seen(10, 8), "flat", 1):
        inside.set()
        worker.join(5)
        assert faiss.omp_get_max_threads() == 1
    assert other == [2] and faiss.omp_get_max_threads() == 2


def test_an_error_inside_restores_the_threads(two_threads):
    with pytest.raises(RuntimeError), search_threads(Seen(10, 8), "flat", 1):
        raise RuntimeError("search failed")
    assert faiss.omp_get_max_threads() == 2
