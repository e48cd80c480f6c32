"""How tests/conftest.py splits the suite between its two pytest-xdist workers: the
group of a module, and the order xdist's scope scheduler (ours on top) deals the
scopes in, driven here with stand-in workers instead of real ones."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.conftest import (
    BESIDE_CLUSTERS,
    IN_PROCESS_DIRS,
    IN_PROCESS_GROUP,
    PROCESSES_GROUP,
    PROJECT_ROOT,
    STARTS_PROCESSES,
    pytest_xdist_make_scheduler,
    xdist_group_of,
)

pytest.importorskip("xdist")

TESTS = PROJECT_ROOT / "tests"
BESIDE = sorted(BESIDE_CLUSTERS)


def test_in_process_modules_that_start_processes_and_the_rest_fall_in_their_groups():
    assert xdist_group_of(TESTS / "unit" / "test_records.py") == IN_PROCESS_GROUP
    assert xdist_group_of(TESTS / "property" / "test_txn_model.py") == IN_PROCESS_GROUP
    assert xdist_group_of(TESTS / "unit" / "test_many_partitions.py") == PROCESSES_GROUP
    assert xdist_group_of(TESTS / "cluster" / "test_balancer.py") == PROCESSES_GROUP
    assert xdist_group_of(TESTS / "interop" / "test_docs_commands.py") == PROCESSES_GROUP


def test_each_module_beside_the_clusters_is_a_scope_of_its_own():
    scopes = {xdist_group_of(TESTS / relative) for relative in BESIDE}
    assert len(scopes) == len(BESIDE) and not scopes & {IN_PROCESS_GROUP, PROCESSES_GROUP}


@pytest.mark.parametrize("relative", BESIDE)
def test_a_module_beside_the_clusters_exists_and_starts_processes(relative):
    # A renamed module would silently go back to the process group, and an
    # in-process one is dealt with its group already.
    assert (TESTS / relative).is_file()
    assert relative.split("/")[0] not in IN_PROCESS_DIRS or relative.rsplit("/", 1)[1] in STARTS_PROCESSES


class StandInWorker:
    """What xdist's scheduler uses of a worker: the tests it is sent, and a shutdown."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def nodeids(relative: str, count: int) -> list[str]:
    return [f"tests/{relative}::test_{i}" for i in range(count)]


# The process group has fewer tests than either module beside the clusters here,
# so that xdist's own order (biggest scope first) would deal a module first.
IN_PROCESS = nodeids("unit/test_records.py", 20)
PROCESSES = nodeids("cluster/test_balancer.py", 3)
FIRST_BESIDE = nodeids(BESIDE[0], 6)
SECOND_BESIDE = nodeids(BESIDE[1], 5)
COLLECTION = IN_PROCESS + FIRST_BESIDE + PROCESSES + SECOND_BESIDE


def started_scheduler():
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"], option=SimpleNamespace(loadscopereorder=True))
    scheduler = pytest_xdist_make_scheduler(config, None)
    workers = [StandInWorker("gw0"), StandInWorker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
    for worker in workers:
        scheduler.add_node_collection(worker, COLLECTION)
    scheduler.schedule()
    return scheduler, workers


def sent_nodeids(worker: StandInWorker) -> list[str]:
    return [COLLECTION[index] for index in worker.sent]


def complete(scheduler, worker: StandInWorker, nodeid: str) -> None:
    scheduler.mark_test_complete(worker, COLLECTION.index(nodeid))


def test_each_worker_starts_with_one_group_and_the_modules_wait():
    scheduler, (first, second) = started_scheduler()
    assert sent_nodeids(first) == IN_PROCESS
    assert sent_nodeids(second) == PROCESSES
    assert list(scheduler.workqueue) == [xdist_group_of(TESTS / BESIDE[0]), xdist_group_of(TESTS / BESIDE[1])]


def test_the_worker_that_runs_out_first_takes_the_modules_one_at_a_time():
    scheduler, (in_process, processes) = started_scheduler()
    # xdist sends more once a worker has two tests or fewer left.
    for nodeid in IN_PROCESS[:-3]:
        complete(scheduler, in_process, nodeid)
    assert sent_nodeids(in_process) == IN_PROCESS
    complete(scheduler, in_process, IN_PROCESS[-3])
    assert sent_nodeids(in_process) == IN_PROCESS + FIRST_BESIDE
    for nodeid in IN_PROCESS[-2:] + FIRST_BESIDE[:-3]:
        complete(scheduler, in_process, nodeid)
    assert sent_nodeids(in_process) == IN_PROCESS + FIRST_BESIDE
    # The process worker, done with its group, takes the next module first.
    for nodeid in PROCESSES:
        complete(scheduler, processes, nodeid)
    assert sent_nodeids(processes) == PROCESSES + SECOND_BESIDE
    assert sent_nodeids(in_process) == IN_PROCESS + FIRST_BESIDE
    assert not scheduler.workqueue
