"""The rest of a long checkpoints read handed to a restore process
(bridge/engine/restore_process.py), against the real broker: what the event loop's
restorer holds after the child fed it is what reading the whole partition on the event
loop gives, deletions and rewrites past the hand-over included; a child that dies, or a
read cancelled midway, costs the partition nothing but the time; an idle child ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import struct
import sys
import threading
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from bridge.config.model import Config
from bridge.core.task.lifecycle import ClosedTask, TaskRecord
from bridge.engine import restore, restore_process
from bridge.engine.restore import PartitionLog
from bridge.engine.restore_process import Restores
from bridge.kafka.auth import client_options
from bridge.wire import checkpoints
from tests.support.factories import task_record
from tests.support.services import Env, bridge_config, run_cli
from tests.support.waiting import until

pytestmark = pytest.mark.asyncio


@pytest.fixture(autouse=True)
def _small_hand_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records read on the event loop before the rest is offered, and the least rest
    offered: 20,000 and 5,000 in the bridge."""
    monkeypatch.setattr(restore, "HAND_OVER_AFTER", 1_000)
    monkeypatch.setattr(restore, "HAND_OVER_LEAST", 500)


async def _written(env: Env, tmp_path: Path, closed: int) -> Config:
    """A checkpoints topic whose partition 1 holds, in this order: a partition record,
    ``closed`` closed Tasks, 30 live ones and an undecodable record; then, well past
    the hand-over, deletions and a rewrite of records before it, a newer partition
    record and ``closed`` more closed Tasks."""
    path, config = bridge_config(env, tmp_path, partitions=2)
    assert run_cli(path, "topics").returncode == 0

    def done(n: int) -> tuple[bytes, bytes | None]:
        record = task_record(f"done-{n}", 3, task_id=f"t-done-{n}", closed=True, closed_at=1_000.0 + n)
        return f"done-{n}".encode(), checkpoints.encode(record)

    def live(n: int, seq: int) -> tuple[bytes, bytes | None]:
        return f"live-{n}".encode(), checkpoints.encode(task_record(f"live-{n}", seq, task_id=f"t-live-{n}"))

    batch: list[tuple[bytes, bytes | None]] = [
        (checkpoints.PARTITION_KEY, checkpoints.PartitionRecord(1, [43], ["c-9"], 7).encode())
    ]
    batch += [done(n) for n in range(closed)]
    batch += [live(n, n + 1) for n in range(30)]
    batch += [(b"broken", b"{not json")]
    batch += [(f"done-{n}".encode(), None) for n in range(10)]
    batch += [(b"live-7", None), live(3, 99)]
    batch += [(checkpoints.PARTITION_KEY, checkpoints.PartitionRecord(1, [], [], 80).encode())]
    batch += [done(n) for n in range(closed, 2 * closed)]
    topic = config.kafka.checkpoints_topic
    producer = AIOKafkaProducer(linger_ms=20, **client_options(config.kafka))
    await producer.start()
    try:
        sent = [await producer.send(topic, value, key=key, partition=1) for key, value in batch]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    # Last, as the bridge writes: in transactions, one of them aborted (read_committed
    # skips its records, whichever process reads them).
    reopened = checkpoints.encode(task_record("done-20", 5, task_id="t-done-20"))
    txn = AIOKafkaProducer(transactional_id=f"tx-{topic}", **client_options(config.kafka))
    await txn.start()
    try:
        await txn.begin_transaction()
        await txn.send_and_wait(topic, None, key=b"live-5", partition=1)
        await txn.send_and_wait(topic, reopened, key=b"done-20", partition=1)
        await txn.abort_transaction()
        await txn.begin_transaction()
        await txn.send_and_wait(topic, live(9, 77)[1], key=b"live-9", partition=1)
        await txn.commit_transaction()
    finally:
        await txn.stop()
    return config


async def test_the_rest_of_a_long_read_fed_by_a_restore_process_is_the_whole_read(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = await _written(env, tmp_path, closed=3_000)
    here = (await PartitionLog(config, 1).checkpoints()).result()
    assert len(here.tasks) == 2 * 3_000 - 10 + 29 and here.rejected == 1
    assert here.partition is not None and here.partition.offset == 80
    restores = Restores(config)
    try:
        with caplog.at_level(logging.INFO, logger=restore_process.__name__):
            handed = (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result()
        assert "read in a restore process" in caplog.text
        assert handed == here
        rewritten, committed = handed.tasks["live-3"], handed.tasks["live-9"]
        assert isinstance(rewritten, TaskRecord) and rewritten.seq == 99
        assert isinstance(committed, TaskRecord) and committed.seq == 77
        assert "live-7" not in handed.tasks and "done-0" not in handed.tasks
        assert "live-5" in handed.tasks and isinstance(handed.tasks["done-20"], ClosedTask)  # the abort's
        closed = [t for t in handed.tasks.values() if isinstance(t, ClosedTask)]
        assert {t.agent for t in closed} == {"writer"} and len(closed) == 2 * 3_000 - 10
        # A partition with no more than the threshold left is read where it is.
        empty = (await PartitionLog(config, 0).checkpoints(restores.hand_over(0))).result()
        assert empty.tasks == {} and caplog.text.count("read in a restore process") == 1
    finally:
        await restores.close()
    assert restores.processes[0].pid is None


async def test_a_restore_process_reads_the_next_rest_while_the_last_reply_is_fed_in(env: Env, tmp_path: Path) -> None:
    """Its whole reply taken off the pipe, the process is free: a second rest read by it
    meanwhile, and the first fed in after, each restore what reading them here does."""
    config = await _written(env, tmp_path, closed=3_000)
    log_ = PartitionLog(config, 1)
    end = await log_.end(log_.checkpoints_tp(), "read_committed")
    restores = Restores(config)
    (process,) = restores.processes
    first, second = checkpoints.Restorer(slim_closed=True), checkpoints.Restorer(slim_closed=True)
    seconds: list[asyncio.Task[None]] = []

    def received() -> None:
        assert first.records == 0  # nothing fed in yet
        process.free("first")  # what Restores does here
        assert not process.busy
        process.reading = "second"
        seconds.append(asyncio.create_task(process.read(config, 1, 2_000, end, second)))

    try:
        process.reading = "first"
        await process.read(config, 1, 0, end, first, received=received)
        await seconds[0]
        assert first.result() == (await PartitionLog(config, 1).checkpoints()).result()
        here = checkpoints.Restorer(slim_closed=True)
        await log_.read_into(here, 2_000, end)
        assert second.result() == here.result() and second.records > 4_000
    finally:
        await restores.close()


async def test_a_long_reply_is_fed_in_as_it_comes(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bytes a reply may hold before it is all in, its chunks are fed in as
    they come: the same restore."""
    monkeypatch.setattr(restore_process, "REPLY_HELD_BYTES", 1)
    config = await _written(env, tmp_path, closed=3_000)
    expected = (await PartitionLog(config, 1).checkpoints()).result()
    restores = Restores(config)
    try:
        assert (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result() == expected
    finally:
        await restores.close()


async def test_a_reply_frame_no_process_could_hold_ends_the_reply() -> None:
    """The thread reading a child's replies fails on a frame's length (2**62 bytes): the
    reply ends as if the child had, rather than being waited on for ever."""
    r, w = os.pipe()
    replies: asyncio.Queue[bytes] = asyncio.Queue()
    pump = threading.Thread(target=restore_process._pump, args=(r, asyncio.get_running_loop(), replies), daemon=True)
    pump.start()
    try:
        os.write(w, struct.pack(">Q", 1 << 62))
        with pytest.raises(EOFError):
            await asyncio.wait_for(restore_process._frame(replies), 10)
    finally:
        os.close(w)
    pump.join(5)
    assert not pump.is_alive()


async def test_a_restore_process_that_died_leaves_the_rest_to_the_event_loop(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = await _written(env, tmp_path, closed=2_000)
    expected = (await PartitionLog(config, 1).checkpoints()).result()
    restores = Restores(config)  # bridge.restore_processes = 1
    (process,) = restores.processes
    try:
        assert (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result() == expected
        pid = process.pid
        assert pid is not None
        os.kill(pid, 9)
        await until(lambda: not _alive(pid), timeout=5, what="the killed process gone")
        with caplog.at_level(logging.WARNING, logger=restore_process.__name__):
            assert (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result() == expected
        assert "restoring the rest on the event loop: the restore process ended" in caplog.text
        assert process.pid is None and not process.busy
        # The next read that offers its rest starts a new process.
        assert (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result() == expected
        assert process.pid not in (None, pid)
    finally:
        await restores.close()


async def test_a_restore_process_that_cannot_start_leaves_the_rest_to_the_event_loop(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod's pids limit, or no file descriptor left: the open goes on, on the event loop."""
    config = await _written(env, tmp_path, closed=1_500)
    expected = (await PartitionLog(config, 1).checkpoints()).result()
    restores = Restores(config)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    try:
        with caplog.at_level(logging.WARNING, logger=restore_process.__name__):
            assert (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result() == expected
        assert "restoring the rest on the event loop: the restore process ended (FileNotFoundError)" in caplog.text
        assert restores.processes[0].pid is None and not restores.processes[0].busy
    finally:
        await restores.close()


async def test_a_read_cancelled_midway_ends_its_process(env: Env, tmp_path: Path) -> None:
    """A partition revoked while a restore process reads the rest of it: the process is
    ended (what it would write back belongs to no one), and free for the next read."""
    config = await _written(env, tmp_path, closed=40_000)
    restores = Restores(config)
    (process,) = restores.processes
    try:
        reading, pid = await _handed_over(config, restores)
        await asyncio.sleep(0.2)  # the child is reading (80,000 records take seconds)
        assert not reading.done()
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        await until(lambda: not process.busy, timeout=5, what="the process free again")
        assert process.pid is None
        await until(lambda: not _alive(pid), timeout=5, what="the process of the cancelled read gone")
        whole = (await PartitionLog(config, 1).checkpoints(restores.hand_over(1))).result()
        assert len(whole.tasks) == 2 * 40_000 - 10 + 29
    finally:
        await restores.close()


async def test_a_restore_process_that_stopped_replying_is_ended_and_the_rest_read_here(
    env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process frozen midway (SIGSTOP: it neither ends nor replies) is ended at its
    reply's deadline, and the partition's open reads the rest on the event loop."""
    monkeypatch.setattr(restore_process, "REPLY_SECONDS_LEAST", 1.0)
    monkeypatch.setattr(restore_process, "REPLY_SECONDS_PER_RECORD", 0.0)
    config = await _written(env, tmp_path, closed=20_000)
    expected = (await PartitionLog(config, 1).checkpoints()).result()
    restores = Restores(config)
    (process,) = restores.processes
    try:
        reading, pid = await _handed_over(config, restores)
        os.kill(pid, signal.SIGSTOP)
        with caplog.at_level(logging.WARNING, logger=restore_process.__name__):
            assert (await asyncio.wait_for(reading, 30)).result() == expected
        assert "the restore process did not reply within 1 s" in caplog.text
        assert process.pid is None and not process.busy
        await until(lambda: not _alive(pid), timeout=5, what="the stopped process killed")
    finally:
        await restores.close()


async def test_an_idle_restore_process_ends(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restore_process, "IDLE_SECONDS", 0.5)
    config = await _written(env, tmp_path, closed=1_500)
    restores = Restores(config)
    (process,) = restores.processes
    try:
        await PartitionLog(config, 1).checkpoints(restores.hand_over(1))
        pid = process.pid
        assert _alive(pid)
        await until(lambda: process.pid is None and not _alive(pid), timeout=10, what="the idle process ended")
    finally:
        await restores.close()


async def _handed_over(config: Config, restores: Restores) -> tuple[asyncio.Task[checkpoints.Restorer], int]:
    """Partition 1's open, reading, and the pid of the process it handed its rest to."""
    (process,) = restores.processes
    reading = asyncio.create_task(PartitionLog(config, 1).checkpoints(restores.hand_over(1)))
    await until(lambda: process.pid is not None, timeout=20, what="the rest handed to a restore process")
    assert process.pid is not None
    return reading, process.pid


def _alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not reaped, does not)."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
