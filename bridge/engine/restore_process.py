"""Restore processes: the rest of a long checkpoints read, on another core
(``bridge.restore_processes``).

A rebalance that hands a member partitions holding a million closed checkpoints
spends most of its time reading and decoding them, record after record on the
event loop's core, while the machine's other cores idle
(bench/results/2026-12-07-restore-1m-closed.json). Every partition's open reads its
checkpoints on the event loop, all at once, as before; one that has read
:data:`~bridge.engine.restore.HAND_OVER_AFTER` records (20,000) with more than
:data:`~bridge.engine.restore.HAND_OVER_LEAST` (5,000) left offers the rest to a
restore process after each batch, and the first free process takes it: it reads the
partition from there to the same end and decodes it as the event loop would (the
same code), then hands back what a restore keeps, packed: each
closed Task as its key and its :attr:`~bridge.core.task.lifecycle.ClosedTask.packed`
bytes, every other record as read, a deleted key as None. The event loop feeds that
into the partition's restorer a chunk at a time, as if it had read on. A process
that is done takes the next rest offered, so the long partitions are shared between
the cores as they go, and a restart's partitions of a few thousand records are never
offered (a process costs a round trip through an event loop that is busy resuming
Tasks: bench/results/2026-12-07-restore-processes.json).

A process is started when a rest is first handed over and ended when none has been
for :data:`IDLE_SECONDS`. If it fails (it died, or its read failed), that partition
reads its rest on the event loop, and the next rest handed over starts a new process.
It ends with the bridge too: a read of its standard input that finds the pipe closed
ends it, whatever ended its parent.

Between the two processes: frames of an 8-byte length and a pickle, over the
child's standard input and output (the child's own output goes to its standard
error, as the bridge's logs do). A job: the config, the partition, the offsets to
read from and to, this process's closed-Task tables; its reply: ``("ok", (records
read, whether a partition record was, the newest), the child's tables)`` or
``("failed", why, None)``, then the chunks and ``None``. Only this process's own
child reads what it writes, and only this process reads what the child writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, TypeAlias

import bridge
from bridge.config.model import Config
from bridge.core.task import lifecycle
from bridge.engine import restore
from bridge.engine.heap import old_collections_deferred, settle_heap, trim_heap
from bridge.engine.host import HandOver
from bridge.observe import logs
from bridge.wire import checkpoints

log = logging.getLogger(__name__)

# How long a restore process is kept with nothing to read: a rebalance's partitions
# come within seconds of each other; it costs memory (tens of MiB) while it waits.
IDLE_SECONDS = 10.0
# Keys per frame sent back, and the most bytes of records in one: each unpickled
# between two turns of the event loop (a few milliseconds each), not one partition's
# million in one, nor 4,096 live checkpoints of up to a MiB each in one.
CHUNK = 4096
CHUNK_BYTES = 8 << 20
# How long a process may take to reply to a rest: this, and this much more per record of
# it. One that stopped without ending (frozen, SIGSTOPped) is ended then, and the rest is
# read on the event loop. A process that shared a core with the broker and the bridge
# took ~26 us of wall per record (bench/results/2026-12-07-restore-processes.json); this
# allows four times that.
REPLY_SECONDS_LEAST = 30.0
REPLY_SECONDS_PER_RECORD = 100e-6
# The most bytes of a reply held before it is all in; past this its chunks are fed in as
# they come (live checkpoints of up to a MiB each), and the child waits on the pipe.
REPLY_HELD_BYTES = 64 << 20

_HEAD = struct.Struct(">Q")
# What makes a ClosedTask here from a closed Task the child packed (closed_unpacker).
Unpack: TypeAlias = Callable[[str, bytes], lifecycle.ClosedTask]
# The folder the bridge package was imported from (site-packages, or a checkout).
_HOME = os.path.dirname(os.path.dirname(os.path.abspath(bridge.__file__)))


class RestoreProcessFailed(Exception):
    """The restore process ended, or said its read failed."""


class RestoreProcess:
    """One child process that reads the rest of a checkpoints partition at a time."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        # The child's replies, frame by frame, as a thread of this process reads them
        # off the pipe (_pump); b"" once the pipe closed.
        self._replies: asyncio.Queue[bytes] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._exits: set[asyncio.Task[int]] = set()
        # The rest being read (Restores.hand_over), from the offer until its reply is in:
        # one read at a time, or the replies of two would interleave in the pipe.
        self.reading: object | None = None

    @property
    def busy(self) -> bool:
        return self.reading is not None

    def free(self, reading: object) -> None:
        """``reading`` is done with this process (if it still holds it)."""
        if self.reading is reading:
            self.reading = None

    @property
    def pid(self) -> int | None:
        """The child's, while one runs."""
        return None if self._proc is None else self._proc.pid

    async def read(
        self,
        config: Config,
        partition: int,
        start: int,
        end: int,
        into: checkpoints.Restorer,
        *,
        received: Callable[[], None] = lambda: None,
    ) -> None:
        """Feed ``into`` (a restorer fed up to ``start``) with the records of checkpoints
        partition ``partition`` from offset ``start`` to ``end``, read_committed.
        ``received`` is called once the child's whole reply is in, before the last of it
        is fed in: the child can take the next rest from then on."""
        body, unpack, frames = await self._reply(config, partition, start, end, into)
        received()
        try:
            await _fed(into, unpack, frames)
            # Last: a reply fed in partly leaves ``into`` to be fed the same records again
            # from ``start`` (the newest value per key comes out the same), but not
            # counted twice.
            into.followed_by(*body)
        except Exception as exc:
            # A reply this process cannot take (a child of another release, say); the
            # child may be reading the next rest already: it is left to it.
            raise RestoreProcessFailed(f"the restore process's reply failed ({type(exc).__name__})") from None

    async def _reply(
        self, config: Config, partition: int, start: int, end: int, into: checkpoints.Restorer
    ) -> tuple[Any, Unpack, list[bytes]]:
        """Send the child the job; its reply: (records read, whether a partition record
        was, the newest), what makes its ClosedTasks here, and the chunks still pickled
        (those past :data:`REPLY_HELD_BYTES` already fed into ``into``)."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        deadline = REPLY_SECONDS_LEAST + (end - start) * REPLY_SECONDS_PER_RECORD
        try:
            proc = self._proc or await self._start()
            replies = self._replies
            assert proc.stdin is not None and replies is not None
            job = pickle.dumps((config, partition, start, end, lifecycle.closed_names()), pickle.HIGHEST_PROTOCOL)
            proc.stdin.write(_HEAD.pack(len(job)) + job)
            async with asyncio.timeout(deadline):
                await proc.stdin.drain()
                outcome, body, names = pickle.loads(await _frame(replies))  # our own child
                if outcome != "ok":
                    raise _Failed(body)
                unpack = lifecycle.closed_unpacker(names)
                frames: list[bytes] = []
                held = 0
                while (frame := await _frame(replies)) != _END:
                    frames.append(frame)
                    held += len(frame)
                    if held > REPLY_HELD_BYTES:  # a long reply of large records: fed in as it comes
                        await _fed(into, unpack, frames)
                        held = 0
        except _Failed as failed:
            # The child said its read failed, and goes on: the pipe holds nothing more.
            self._idle = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._end)
            raise RestoreProcessFailed(failed.args[0]) from None
        except TimeoutError:
            # Stopped without ending (frozen, SIGSTOPped): it would hold the open for good.
            self._end()
            raise RestoreProcessFailed(f"the restore process did not reply within {deadline:.0f} s") from None
        except (OSError, EOFError) as exc:
            # It could not start (a pids limit, no file descriptors), or it ended.
            self._end()
            raise RestoreProcessFailed(f"the restore process ended ({type(exc).__name__})") from None
        except Exception as exc:
            # A reply this process cannot take (a child of another release, say).
            self._end()
            raise RestoreProcessFailed(f"the restore process's reply failed ({type(exc).__name__})") from None
        except BaseException:
            # Cancelled (the partition was revoked) or failed midway: what is left in the
            # pipe belongs to no one now.
            self._end()
            raise
        self._idle = asyncio.get_running_loop().call_later(IDLE_SECONDS, self._end)
        return body, unpack, frames

    async def _start(self) -> asyncio.subprocess.Process:
        # The child imports this very bridge: -P keeps the working directory off its
        # path (a checkout of another release there would be imported instead), and the
        # folder this bridge was imported from goes first.
        path = os.pathsep.join([_HOME, *filter(None, [os.environ.get("PYTHONPATH")])])
        replies, child_out = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",
                "-m",
                __name__,
                *logs.settings(),
                str(os.getpid()),
                stdin=asyncio.subprocess.PIPE,
                stdout=child_out,
                env={**os.environ, "PYTHONPATH": path},
            )
        except BaseException:
            os.close(replies)
            raise
        finally:
            os.close(child_out)  # the child's now: the pipe closes when it ends
        self._proc, self._replies = proc, asyncio.Queue()
        # The replies are read off the pipe as the child writes them, by a thread: read
        # on the event loop, a piece per turn, while the loop was busy restoring other
        # partitions and resuming Tasks, the child spent more time blocked writing its
        # reply than reading the partition (py-spy --idle).
        pump = threading.Thread(
            target=_pump, args=(replies, asyncio.get_running_loop(), self._replies), name="restore-replies", daemon=True
        )
        try:
            pump.start()
        except BaseException:
            os.close(replies)  # no thread (a pids limit): the caller ends the child
            raise
        return proc

    def _end(self) -> None:
        """End the child (killed: what it holds or reads is no one's now) and reap it."""
        proc, self._proc = self._proc, None
        self._replies = None  # its thread ends when the pipe closes
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        reaped = asyncio.ensure_future(proc.wait())
        self._exits.add(reaped)
        reaped.add_done_callback(self._exits.discard)

    async def close(self) -> None:
        self._end()
        await asyncio.gather(*self._exits, return_exceptions=True)


# The frame that ends a reply's chunks: None, pickled.
_END = pickle.dumps(None, pickle.HIGHEST_PROTOCOL)


def _pump(fd: int, loop: asyncio.AbstractEventLoop, replies: asyncio.Queue[bytes]) -> None:
    """A thread's: each frame the child writes, as it comes, into ``replies``, then b""
    once the pipe closed (the child ended) or this thread failed, unless the loop
    closed first."""
    frame = b"-"
    try:
        with os.fdopen(fd, "rb") as pipe:
            while frame:
                head = pipe.read(_HEAD.size)
                size = _HEAD.unpack(head)[0] if len(head) == _HEAD.size else 0
                frame = pipe.read(size) if size else b""
                if len(frame) != size:
                    frame = b""  # the pipe closed midway through the frame
                if frame:
                    loop.call_soon_threadsafe(replies.put_nowait, frame)
    except RuntimeError:
        return  # the loop is closed: no one reads
    except Exception as exc:  # a length no process could hold: the reply ends here
        log.warning("a restore process's reply could not be read (%s)", type(exc).__name__)
    finally:
        with contextlib.suppress(RuntimeError):  # the end, whatever ended the thread
            loop.call_soon_threadsafe(replies.put_nowait, b"")


async def _fed(into: checkpoints.Restorer, unpack: Unpack, frames: list[bytes]) -> None:
    """Feed ``frames`` (chunks of a reply, pickled by our own child) into ``into``, a
    turn of the event loop each; each freed once fed in, and the list emptied."""
    for i in range(len(frames)):
        frame, frames[i] = frames[i], b""
        into.unfold(pickle.loads(frame), unpack)
        await asyncio.sleep(0)
    frames.clear()


class _Failed(Exception):
    """The child said its read failed (why)."""


async def _frame(replies: asyncio.Queue[bytes]) -> bytes:
    frame = await replies.get()
    if not frame:
        raise EOFError("the restore process's pipe closed")
    return frame


class Restores:
    """The process's restore processes, offered the rest of each long read."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.processes = [RestoreProcess() for _ in range(config.bridge.restore_processes)]

    def hand_over(self, partition: int) -> HandOver | None:
        """What a partition's restore offers the rest of its read to: a free process,
        if there is one when it offers (bridge/engine/host.py)."""
        if not self.processes:
            return None

        def offer(restorer: checkpoints.Restorer, start: int, end: int) -> asyncio.Future[bool] | None:
            process = next((p for p in self.processes if not p.busy), None)
            if process is None:
                return None
            rest = asyncio.ensure_future(self._rest(process, partition, restorer, start, end))
            process.reading = rest
            # Free again once its reply is in (the child takes the next rest while this one
            # is fed in), or when it failed or was cancelled (even before it began).
            rest.add_done_callback(process.free)
            return rest

        return offer

    async def _rest(
        self, process: RestoreProcess, partition: int, restorer: checkpoints.Restorer, start: int, end: int
    ) -> bool:
        try:
            started = time.monotonic()
            reading = asyncio.current_task()
            await process.read(self.config, partition, start, end, restorer, received=lambda: process.free(reading))
        except RestoreProcessFailed as exc:
            log.warning("partition %d: restoring the rest on the event loop: %s", partition, exc)
            return False
        log.info(
            "partition %d: checkpoints from offset %d to %d read in a restore process in %.2f s",
            partition,
            start,
            end,
            time.monotonic() - started,
        )
        return True

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.processes))


# ------------------------------------------------------------------ the child --


def _read(stream: IO[bytes], size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def serve(jobs: IO[bytes], replies: IO[bytes]) -> int:
    """Read partitions as ``jobs`` ask until it closes; each reply in frames. One event
    loop for the process's life: what a Kafka login keeps per loop (an OAuth2 token
    and its client, bridge/identity/) serves every read."""
    with asyncio.Runner() as runner:
        return _serve(runner, jobs, replies)


def _serve(runner: asyncio.Runner, jobs: IO[bytes], replies: IO[bytes]) -> int:
    while (head := _read(jobs, _HEAD.size)) is not None:
        job = _read(jobs, _HEAD.unpack(head)[0])
        if job is None:
            break
        config, partition, start, end, names = pickle.loads(job)  # our own parent
        lifecycle.adopt_closed_names(names)
        try:
            with old_collections_deferred():  # what it keeps lives until it is sent
                restorer = runner.run(_rest(config, partition, start, end))
        except Exception as exc:
            _reply(replies, ("failed", f"{type(exc).__name__}: {exc}", None))
        else:
            # The fold is done: the tables hold every name its ClosedTasks index.
            body = (restorer.records, restorer.partition_read, restorer.partition_value)
            _reply(replies, ("ok", body, lifecycle.closed_names()))
            for chunk in restorer.folded(CHUNK, CHUNK_BYTES):  # each sent as made: one held at a time
                _reply(replies, chunk)
            _reply(replies, None)
            del restorer
        replies.flush()
        # What the read held goes back to the system while this process waits.
        trim_heap()
    return 0


async def _rest(config: Config, partition: int, start: int, end: int) -> checkpoints.Restorer:
    restorer = checkpoints.Restorer(slim_closed=True, tombstones=True)
    await restore.PartitionLog(config, partition).read_into(restorer, start, end)
    return restorer


def _reply(replies: IO[bytes], frame: Any) -> None:
    data = pickle.dumps(frame, pickle.HIGHEST_PROTOCOL)
    replies.write(_HEAD.pack(len(data)) + data)


def main() -> int:
    logs.setup(*sys.argv[1:3])  # the bridge's level and format (logs.settings)
    # A Ctrl-C reaches the whole process group: the bridge ends this process (its
    # input closes). Ignored here, asyncio.run also installs no handler of its own: on
    # Python 3.11 taking that handler back off formats the finished task's repr, the
    # whole restorer with it (a fifth of this process's time in a py-spy profile).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Killed with the bridge, not left reading for no one (Linux's PR_SET_PDEATHSIG).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != int(sys.argv[3]):
        return 0  # the bridge ended before this process got here
    # The frames go out on the standard output as it was; anything printed by
    # this process goes to its standard error instead.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    settle_heap()  # as the bridge's: the modules out of every walk, fewer young collections
    try:
        return serve(sys.stdin.buffer, replies)
    except BrokenPipeError:
        return 0  # the bridge ended


if __name__ == "__main__":
    sys.exit(main())
