"""The Task lifecycle: state rules, dedupe and sequence numbers. Pure, no IO.

A :class:`TaskRecord` is everything the bridge knows about one Task and is
exactly what a checkpoint holds. Agent traffic arrives as normalized
:data:`Update` values (the dialects produce them); :meth:`TaskRecord.apply`
decides what of it becomes events and advances ``seq`` and ``afterSeq``. The
IO layers never touch those counters themselves, so the exactly-once rules
live in this one file and its tests.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeAlias, TypeVar

import orjson

from bridge.core.task import artifacts

TERMINAL_STATES = frozenset({"completed", "failed", "canceled", "rejected"})
# The Task waits for a reply; its stream may end without it being lost.
PAUSED_STATES = frozenset({"input-required", "auth-required"})
# What the bridge observed that is not an agent state (docs/gateway-protocol.md:
# "Record cancellation, failure, and client timeout separately"). `rejected` is the agent refusing a
# start; the bridge's own give-ups have their own names.
BridgeOutcome = Literal[
    "timeout",  # the bridge's deadline passed; the agent's Task may still run
    "lost",  # the Task can no longer be observed (resubscribe and tasks/get failed)
    "cancel-requested",
    "cancel-failed",  # tasks/cancel failed for good; the Task goes on
    "rejected",  # the agent refused the start (JSON-RPC error, HTTP 4xx)
    "start-timeout",  # no first answer to a start in time; the agent may have made a Task
    "unavailable",  # the agent could not be reached (transport errors, HTTP 5xx) for a start
    "no-task",  # the agent answered a start without a Task (a bare Message, an empty stream)
    "agent-removed",  # the Task's agent is no longer in the registry
    "unreadable",  # the agent sent what the bridge cannot read (over a size cap, not the protocol)
    "unpublishable",  # stands in for one event its topic could not take; the Task goes on
]
# Outcomes after which the bridge follows the Task no more.
CLOSING_OUTCOMES = frozenset(
    {"timeout", "lost", "rejected", "start-timeout", "unavailable", "no-task", "agent-removed", "unreadable"}
)
# How many recent commandIds a record remembers for dedupe (as digests, so a
# checkpoint stays small whatever ids producers choose).
COMMAND_MEMORY = 32
# Per-artifact dedupe state kept per Task: past this, the oldest finished
# artifacts are forgotten (a snapshot would republish such an artifact whole,
# `append: false`, which replaces it: still the same artifact downstream).
ARTIFACT_MEMORY = 256
# Artifact ids longer than this are remembered by digest.
_ARTIFACT_KEY_CHARS = 128
# History messages published per Task, remembered (by digest) for dedupe.
MESSAGE_MEMORY = 64
# Push notification bodies applied per Task, remembered (by digest) for dedupe.
NOTIFICATION_MEMORY = 64

DropReason = Literal["replayed", "duplicate", "after-terminal", "foreign-task", "no-task"]
# What became of a push notification (bridge_push_notifications_applied_total's result).
# "held": a status that waits for a tasks/get snapshot first (bridge.core.task.resume.held_for_snapshot).
NotificationResult = Literal["applied", "held", "duplicate", "ignored-unknown-task", "ignored-closed", "unreadable"]
EventKind = Literal["status", "artifact", "message", "bridge"]

JSON = dict[str, Any]


def is_terminal(state: str | None) -> bool:
    """Only the four known terminal states end a Task; unknown states never do."""
    return state in TERMINAL_STATES


def _digest(value: object) -> str:
    return hashlib.blake2b(orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=12).hexdigest()


def status_digest(state: str, message: JSON | None) -> str:
    """What a published status is remembered by (:attr:`TaskRecord.status_digest`)."""
    return _digest([state, message])


def _message_digest(message: JSON) -> str:
    """What a published message is remembered by: its messageId, else its content."""
    mid = message.get("messageId")
    return _digest(["id", mid] if isinstance(mid, str) and mid else ["content", message])


def command_digest(command_id: str) -> str:
    """What a record remembers of a commandId: 16 hex characters whatever its length."""
    return hashlib.blake2b(command_id.encode(), digest_size=8).hexdigest()


def artifact_key(artifact_id: str) -> str:
    return artifact_id if len(artifact_id) <= _ARTIFACT_KEY_CHARS else "#" + _digest(artifact_id)


def roll(digest: str, parts: list[Any]) -> str:
    """Chain ``parts`` onto a running artifact digest, one part at a time, so the
    digest of a part list does not depend on how it was split into chunks."""
    return roll_encoded(digest, [orjson.dumps(part, option=orjson.OPT_SORT_KEYS) for part in parts])


def roll_encoded(digest: str, encoded: list[bytes]) -> str:
    """:func:`roll` of parts already encoded with sorted keys (each encoded once per
    event, and its length reused to size the parts: :func:`encoded_size`).

    SHA-1, not BLAKE2: this hashes every artifact byte the bridge publishes, and
    SHA-1 runs at twice BLAKE2's speed here (CPU SHA extensions); it only has to
    tell an agent's own parts apart, not resist forgery."""
    for blob in encoded:
        h = hashlib.sha1(digest.encode() + b"\x00", usedforsecurity=False)
        h.update(blob)  # not joined to the prefix: no copy of a large part
        digest = h.hexdigest()[:24]
    return digest


def encoded_size(encoded: list[bytes]) -> int:
    """Bytes of the JSON list of these encoded parts: sorting keys changes no length."""
    return sum(map(len, encoded)) + max(len(encoded) - 1, 0) + 2


# ---------------------------------------------------------------- updates ---
#
# Updates and events are plain slotted dataclasses, not frozen ones: one of each is
# made per agent event, and a frozen dataclass's __init__ (object.__setattr__ per
# field) costs twice as much. Nothing mutates them after construction.


@dataclass(slots=True)
class StatusUpdate:
    task_id: str
    context_id: str | None
    state: str
    message: JSON | None = None
    source_seq: int | None = None


@dataclass(slots=True)
class ArtifactUpdate:
    task_id: str
    context_id: str | None
    artifact_id: str
    name: str | None
    parts: list[Any]
    append: bool = False
    last_chunk: bool = False
    source_seq: int | None = None


@dataclass(slots=True)
class TaskSnapshot:
    """A whole Task object: the first event of a stream, tasks/get, tasks/cancel."""

    task_id: str
    context_id: str | None
    state: str
    message: JSON | None = None
    artifacts: tuple[JSON, ...] = ()
    source_seq: int | None = None
    history: tuple[JSON, ...] = ()


@dataclass(slots=True)
class MessageUpdate:
    """A Message the agent streamed on its own (not inside a status). Before the
    agent names a Task, ``task_id`` is None: it answered without one."""

    task_id: str | None
    context_id: str | None
    message: JSON
    source_seq: int | None = None


Update = StatusUpdate | ArtifactUpdate | TaskSnapshot | MessageUpdate


# ----------------------------------------------------------------- events ---


@dataclass(slots=True)
class Event:
    """One record for the events topic, before encoding (see :mod:`bridge.wire.events`)."""

    task_id: str
    seq: int
    kind: EventKind
    body: JSON
    source_seq: int | None = None


@dataclass(slots=True)
class Dropped:
    reason: DropReason


# ----------------------------------------------------------------- record ---


@dataclass(slots=True)
class ArtifactProgress:
    parts: int
    digest: str
    done: bool


@dataclass(slots=True)
class TaskRecord:
    """One taskKey's current Task; its checkpoint (see :mod:`bridge.wire.checkpoints`)."""

    task_key: str
    agent: str
    task_id: str | None = None
    context_id: str | None = None
    # The agent's last state (v0.3 spelling); never a bridge outcome.
    state: str | None = None
    # The bridge outcome that closed the Task, if one did (timeout, lost, ...).
    outcome: str | None = None
    after_seq: int | None = None
    seq: int = 0
    command_ids: list[str] = field(default_factory=list)
    command_id: str | None = None
    start_command_id: str | None = None
    deadline: float | None = None
    closed: bool = False
    cancel_pending: str | None = None
    status_digest: str | None = None
    artifacts: dict[str, ArtifactProgress] = field(default_factory=dict)
    # Digests of the history messages (and status messages) published, newest last.
    messages: list[str] = field(default_factory=list)
    # How many history messages the last snapshot showed, and the digest of its
    # newest: the history up to there was dealt with then (see _history).
    history_count: int | None = None
    history_seen: str | None = None
    # What routed the Task when it started (docs/gateway-protocol.md: "Store the Agent selector ...
    # together"): a config change must not re-route a live Task.
    endpoint: str | None = None
    dialect: str | None = None
    agent_code: str | None = None
    # The protocol binding at the endpoint (bridge/wire/interfaces.py): "auto" until the
    # agent card chose one; None in a route kept before bindings were (JSON-RPC).
    binding: str | None = None
    # The events topic its first event went to: all of a Task's events stay there.
    events_topic: str | None = None
    # Its agent's DLQ when it started: a command about it dead-lettered later goes
    # there, as its events stay in theirs (DESIGN: "the DLQ keeps the same routing").
    dlq_topic: str | None = None
    # The W3C trace context of the start, continued to the agent and the events.
    traceparent: str | None = None
    # Unix time the Task closed (a closed record is kept for a dedupe window).
    closed_at: float | None = None
    # A sequenced Task whose snapshot (tasks/get) published what its SSE replay had
    # not yet delivered: replay after ``after_seq`` would repeat it, so from then on
    # the Task is followed by snapshots only, in this process and after a restore.
    snapshots_only: bool = False
    # Paused with a reply the agent took but had not acted on: watched with tasks/get
    # until it moves, after a restore too (bridge.engine.runner TaskRunner._unanswered).
    watched: bool = False
    # Followed by push notifications (the send carried a push config): no stream, a
    # backstop tasks/get, and after a restore a reconcile first (bridge.core.task.follow).
    push: bool = False
    # Digests of the notification bodies applied, newest last (see apply_notification).
    notified: list[str] = field(default_factory=list)
    # Push: per artifact, the parts a snapshot published at its end whose own
    # notifications may still come, as the running digest before each part and after
    # the last (see apply_notification). Checkpointed: the late notifications may
    # reach the next owner (at most NOTIFICATION_MEMORY parts per artifact).
    snapshot_tails: dict[str, list[str]] = field(default_factory=dict, repr=False)
    # The start's business record: published on the Task's first event, then
    # dropped (never in the shared checkpoints topic: workspace data stays routed).
    metadata: JSON | None = None
    # The events topic partition of the Task's key, computed once (not checkpointed).
    events_partition: int | None = field(default=None, compare=False, repr=False)
    # The Task's row in the Task table (bridge.wire.task_row): the fold of the events
    # published so far. Not checkpointed (it holds the agent's content, which stays in
    # the agent's own topics): read back from the table at an open.
    row: JSON | None = field(default=None, compare=False, repr=False)

    # ---------------------------------------------------------- commands --

    def seen(self, command_id: str) -> bool:
        return command_digest(command_id) in self.command_ids

    def remember(self, command_id: str) -> None:
        digest = command_digest(command_id)
        if digest not in self.command_ids:
            self.command_ids.append(digest)
            del self.command_ids[:-COMMAND_MEMORY]

    @property
    def paused(self) -> bool:
        return self.state in PAUSED_STATES

    @property
    def started(self) -> bool:
        return self.task_id is not None

    @property
    def ended_as(self) -> str | None:
        """How the Task ended: the bridge outcome that closed it, else the agent's state."""
        return self.outcome or self.state

    # ------------------------------------------------- what the engine says --
    # Every change the engine makes to a Task, besides the updates it applies
    # (apply, apply_notification, report), is one of these, named for what
    # happened: the record keeps its own rules.

    def routed(self, route: TaskRoute) -> None:
        """A fresh Task's route, stored when it starts: a config change must not
        re-route a live Task."""
        self.endpoint, self.dialect, self.agent_code = route.endpoint, route.dialect, route.agent_code
        self.binding = route.binding
        self.events_topic, self.dlq_topic, self.traceparent = route.events_topic, route.dlq_topic, route.traceparent

    def spoken_at(self, endpoint: str, dialect: str, binding: str) -> None:
        """The interface the agent's card chose for a Task routed ``binding = "auto"``
        (bridge/wire/interfaces.py): kept from here on, as the rest of its route."""
        self.endpoint, self.dialect, self.binding = endpoint, dialect, binding

    def took(self, command_id: str, *, unmoved: bool = False) -> None:
        """The agent took ``command_id``: the events from here on carry it.
        ``unmoved``: a reply the agent took without acting on it yet; the paused Task
        is watched with ``tasks/get`` until it moves, after a restore too."""
        self.command_id = command_id
        if unmoved:
            self.watched = True

    def cancel_requested(self, command_id: str) -> None:
        """A cancel taken: pending (checkpointed, so a restart asks again) until the
        agent answers it."""
        self.command_id = command_id
        self.cancel_pending = command_id

    def cancel_answered(self) -> None:
        self.cancel_pending = None

    def snapshot_published(self, *, replay_would_repeat: bool) -> None:
        """A ``tasks/get`` snapshot was published in place of a replay;
        ``replay_would_repeat``: it showed what the replay after ``after_seq`` had
        not delivered, so from now on the Task is followed by snapshots only (in this
        process and after a restore): a replay would repeat it."""
        if replay_would_repeat:
            self.snapshots_only = True

    def pushes(self, on: bool) -> None:
        """Whether the Task is followed by push notifications from its next send on."""
        self.push = on

    def published(self, now: float, events_partition: int | None) -> None:
        """Events of the Task went into a transaction at ``now`` (Unix seconds): the
        business record went with its first; a closing one dates the close; the
        events partition of its key is kept (not checkpointed)."""
        if self.seq:
            self.metadata = None
        if self.closed and self.closed_at is None:
            self.closed_at = now
        if events_partition is not None:
            self.events_partition = events_partition

    # ----------------------------------------------------------- updates --

    def apply(self, update: Update, max_artifact_bytes: int | None = None) -> list[Event | Dropped]:
        """Turn one agent update into events, dropping what was already published.

        ``afterSeq`` advances for every update with an SSE id that is not a
        replay, published or not: it is the cursor of what was *processed*.
        Artifact parts beyond ``max_artifact_bytes`` are spread over several
        events (see :mod:`bridge.core.task.artifacts`).
        """
        dropped = self._admit(update)
        if dropped is not None:
            return [Dropped(dropped)]
        src = update.source_seq
        if isinstance(update, StatusUpdate):
            return [self._status(update.state, update.message, src)]
        if isinstance(update, ArtifactUpdate):
            return self._artifact(update, max_artifact_bytes)
        if isinstance(update, MessageUpdate):
            return [self._message(update.message, src)]
        return self._snapshot(update, max_artifact_bytes)

    def apply_notification(
        self, update: Update, body: Any, max_artifact_bytes: int | None = None
    ) -> list[Event | Dropped]:
        """A push notification's ``update`` (``body``: the JSON the agent POSTed),
        applied like any update, once per body.

        Agents deliver notifications at least once. A status or a whole Task sent
        twice is dropped by :meth:`apply`'s own rules, but an appended chunk sent
        twice would be appended twice (a stream never repeats one, so :meth:`apply`
        has no rule for it): a body applied already (the last
        :data:`NOTIFICATION_MEMORY`, by digest) is a duplicate. An agent that
        appends the very same chunk twice on purpose is indistinguishable from a
        redelivery; the second copy then reaches Kafka with the next ``tasks/get``
        snapshot (the backstop), as a missing tail.
        """
        if self.closed:
            return [Dropped("after-terminal")]
        digest = _digest(body)
        if digest in self.notified:
            return [Dropped("duplicate")]
        if isinstance(update, ArtifactUpdate) and self._snapshot_showed(update):
            self._remember_notification(digest)
            return [Dropped("duplicate")]
        out = self.apply(update, max_artifact_bytes)
        if not (len(out) == 1 and isinstance(out[0], Dropped) and out[0].reason in ("foreign-task", "no-task")):
            self._remember_notification(digest)
        return out

    def _remember_notification(self, digest: str) -> None:
        self.notified.append(digest)
        del self.notified[:-NOTIFICATION_MEMORY]

    def _snapshot_showed(self, u: ArtifactUpdate) -> bool:
        """Whether appended chunk ``u`` is the next of the parts a snapshot published at
        its artifact's end (a ``tasks/get`` answered while the chunk's notification was
        still on its way: appending it would repeat them). The agent sends an
        artifact's chunks in order, so they are matched from the first part on; a
        chunk that is not the next ends the matching."""
        key = artifact_key(u.artifact_id)
        tail = self.snapshot_tails.get(key)
        if not tail or not u.append:
            return False
        n = len(u.parts)
        if n < len(tail) and roll(tail[0], u.parts) == tail[n]:
            del tail[:n]
            if len(tail) == 1:
                del self.snapshot_tails[key]
            return True
        del self.snapshot_tails[key]
        return False

    def _admit(self, update: Update) -> DropReason | None:
        """Why ``update`` is not this Task's to publish, if it is not (closed, a
        replay, no Task named, another Task); else None, and the update's Task id,
        context id and SSE id are taken: the first to name the Task names its
        context too (the first context named, if it names none), the last is the
        cursor."""
        if self.closed:
            return "after-terminal"
        src = update.source_seq
        if src is not None and self.after_seq is not None and src <= self.after_seq:
            return "replayed"
        task_id = self.task_id if update.task_id is None else update.task_id
        if task_id is None:  # a Message that names no Task, before any did
            return "no-task"
        if self.task_id is None:
            self.task_id = task_id
            # The agent's context, over one the start command gave: a reply must carry
            # the Task's own (docs/gateway-protocol.md §2), and the events say it.
            self.context_id = update.context_id or self.context_id
        elif task_id != self.task_id:
            return "foreign-task"
        if update.context_id and not self.context_id:
            self.context_id = update.context_id
        if src is not None:
            self.after_seq = src
        return None

    def _status(self, state: str, message: JSON | None, src: int | None) -> Event | Dropped:
        digest = status_digest(state, message)
        if digest == self.status_digest:
            return Dropped("duplicate")
        self.status_digest = digest
        self.state = state
        self.watched = False  # a move: whatever watched the pause has seen it
        terminal = is_terminal(state)
        self.closed = terminal
        if message is not None:
            # The agent may also list it in the Task's history: publish it once.
            self._seen_message(message)
        body: JSON = {"state": state, "terminal": terminal, "message": message}
        return self._event("status", body, src)

    def _seen_message(self, message: JSON, digest: str | None = None) -> bool:
        """Whether ``message`` (of ``digest``, if computed) was published already;
        remembers it if not."""
        digest = digest or _message_digest(message)
        if digest in self.messages:
            return True
        self.messages.append(digest)
        del self.messages[:-MESSAGE_MEMORY]
        return False

    def _message(self, message: JSON, src: int | None, digest: str | None = None) -> Event | Dropped:
        if self._seen_message(message, digest):
            return Dropped("duplicate")
        return self._event("message", {"message": message}, src)

    def _history(self, history: tuple[JSON, ...], src: int | None) -> list[Event | Dropped]:
        """A snapshot's history messages not yet published, oldest first.

        A history only grows (or slides, when the agent returns its newest part): what
        it lists up to the newest message the last snapshot showed was dealt with then,
        published or not (found where it was, else by its digest). What comes after is
        looked up among the messages published, of which the newest MESSAGE_MEMORY are
        remembered, as the memory was before this snapshot (each one published pushes
        the oldest out, which may be the next one looked up). More than MESSAGE_MEMORY
        messages streamed between two snapshots are published once more, at most once:
        a repeat, never a loss.

        With no mark to go by (none yet, a checkpoint from before it, a window slid past
        it) and the memory full, an agent's message listed before the oldest one still
        remembered was streamed and forgotten (an agent moves its status messages into
        its history): it is not published again, where the whole history would be. A
        user's message there is looked up all the same: it only ever comes in a history
        (a reply the agent records)."""
        digests = [_message_digest(m) for m in history]
        start = self._history_start(digests)
        if digests:  # an empty history (an agent that sends none this time) tells nothing
            self.history_count, self.history_seen = len(digests), digests[-1]
        remembered = set(self.messages)
        forgotten = 0
        if start == 0 and len(self.messages) >= MESSAGE_MEMORY:
            forgotten = next((i for i, d in enumerate(digests) if d in remembered), 0)
        out: list[Event | Dropped] = []
        for i in range(start, len(digests)):
            m, d = history[i], digests[i]
            if d in remembered or (i < forgotten and m.get("role") != "user"):
                out.append(Dropped("duplicate"))
                continue
            remembered.add(d)
            out.append(self._message(m, src, d))
        return out

    def _history_start(self, digests: list[str]) -> int:
        """Where the history after the last snapshot's newest message begins (0: all new)."""
        seen, count = self.history_seen, self.history_count
        if seen is None:
            return 0
        if count is not None and 0 < count <= len(digests) and digests[count - 1] == seen:
            return count
        if seen in digests:  # slid: found by its digest, the newest one of that digest
            return len(digests) - digests[::-1].index(seen)
        return 0

    def _artifact(self, u: ArtifactUpdate, cap: int | None) -> list[Event | Dropped]:
        key = artifact_key(u.artifact_id)
        known = self.artifacts.get(key)
        encoded = [orjson.dumps(part, option=orjson.OPT_SORT_KEYS) for part in u.parts]
        if u.append and known is not None:
            progress = ArtifactProgress(known.parts + len(u.parts), roll_encoded(known.digest, encoded), u.last_chunk)
        else:
            progress = ArtifactProgress(len(u.parts), roll_encoded("", encoded), u.last_chunk)
            if known is not None and known.digest == progress.digest and known.done == u.last_chunk:
                return [Dropped("duplicate")]
        # Progress counts the agent's own parts, so a snapshot compares against
        # them however the parts were split into records.
        self.artifacts.pop(key, None)  # re-inserted: the dict runs oldest to newest
        self.artifacts[key] = progress
        if len(self.artifacts) > ARTIFACT_MEMORY:
            oldest = next((k for k, a in self.artifacts.items() if a.done), next(iter(self.artifacts)))
            del self.artifacts[oldest]
        groups = artifacts.split(u.parts, cap, encoded_size(encoded))
        out: list[Event | Dropped] = []
        for i, parts in enumerate(groups):
            body: JSON = {
                "artifact": {
                    "artifactId": u.artifact_id,
                    "name": u.name,
                    "parts": parts,
                    "append": bool(u.append and known is not None) or i > 0,
                    "lastChunk": u.last_chunk and i == len(groups) - 1,
                }
            }
            out.append(self._event("artifact", body, u.source_seq))
        return out

    def _snapshot(self, snap: TaskSnapshot, cap: int | None) -> list[Event | Dropped]:
        """Publish what a whole Task shows that was not published yet, once.

        An artifact whose published parts are a prefix of the snapshot's gets
        only the missing tail (append); one that differs is replaced whole.
        Status goes last so that a terminal state is the last event.
        """
        out = self._history(snap.history, snap.source_seq)
        terminal = is_terminal(snap.state)
        for art in snap.artifacts:
            artifact_id = str(art.get("artifactId", ""))
            parts = list(art.get("parts") or [])
            known = self.artifacts.get(artifact_key(artifact_id))
            if known is not None and len(parts) >= known.parts and roll("", parts[: known.parts]) == known.digest:
                tail = parts[known.parts :]
                if not tail and (known.done or not terminal):
                    continue
                if self.push and tail:
                    self._tail_shown(artifact_id, known.digest, tail)
                update = ArtifactUpdate(
                    snap.task_id, snap.context_id, artifact_id, art.get("name"), tail, append=True, last_chunk=terminal
                )
            else:
                update = ArtifactUpdate(
                    snap.task_id,
                    snap.context_id,
                    artifact_id,
                    art.get("name"),
                    parts,
                    append=False,
                    last_chunk=terminal,
                )
            out.extend(self._artifact(update, cap))
        out.append(self._status(snap.state, snap.message, snap.source_seq))
        return [e for e in out if isinstance(e, Event)] or [Dropped("duplicate")]

    def _tail_shown(self, artifact_id: str, before: str, tail: list[Any]) -> None:
        """A snapshot of a push-followed Task publishes ``tail`` at the end of its
        artifact: remember it part by part for :meth:`_snapshot_showed`."""
        digests = [before]
        # Bounded, as it is checkpointed: a later part of a longer tail, if its
        # notification still comes, is appended again.
        for part in tail[:NOTIFICATION_MEMORY]:
            digests.append(roll(digests[-1], [part]))
        self.snapshot_tails[artifact_key(artifact_id)] = digests

    # ---------------------------------------------------- bridge outcomes --

    def report(self, outcome: BridgeOutcome, reason: str | None = None, message: JSON | None = None) -> Event | Dropped:
        """A bridge-observed outcome: not an agent state, never conflated with one
        (``state`` keeps the agent's last state). ``message``: what the agent said,
        for a start it answered without a Task."""
        if self.closed:
            return Dropped("after-terminal")
        closing = outcome in CLOSING_OUTCOMES
        if closing:
            self.closed = True
            self.outcome = outcome
        body: JSON = {"outcome": outcome, "terminal": closing}
        if reason:
            body["reason"] = reason
        if message is not None:
            body["message"] = message
        if self.task_id is None:
            # The agent never named a Task: name the would-be Task after the start
            # command, so the event still has a key.
            self.task_id = f"start-{self.start_command_id or self.task_key}"
        return self._event("bridge", body, None)

    def _event(self, kind: EventKind, body: JSON, src: int | None) -> Event:
        assert self.task_id is not None
        self.seq += 1
        return Event(self.task_id, self.seq, kind, body, src)


def notification_result(results: list[Event | Dropped]) -> NotificationResult:
    """What a notification's results (of :meth:`TaskRecord.apply_notification`) come to:
    ``applied`` if it published anything; else why not: after the end, another Task's
    id (or none), or a duplicate (dropped as already published)."""
    if any(isinstance(r, Event) for r in results):
        return "applied"
    reasons = {r.reason for r in results if isinstance(r, Dropped)}
    if "after-terminal" in reasons:
        return "ignored-closed"
    if reasons & {"foreign-task", "no-task"}:
        return "ignored-unknown-task"
    return "duplicate"


# What a ClosedTask packs after its key, in one bytes object: when it closed (whole
# seconds), its route (agent and DLQ) and how it ended (indexes into the tables below),
# then the digests of its commandIds: five slots, a float and a separate bytes cost more
# per closed Task held (bench/closed_tasks.py;
# bench/results/2026-12-02-transaction-steps-closed-packed.json). The agent and its DLQ
# share one index: a separate one would put a closed Task with one commandId in
# pymalloc's next size class.
_PACKED = struct.Struct("<IHB")
_AT = struct.Struct("<I")  # _PACKED's first field alone

_N = TypeVar("_N", bound=Hashable)


class _Names(Generic[_N]):
    """The routes (or endings) the process has seen, by index: a handful of each.
    Past ``limit`` of them (only hostile checkpoints could get there) a new one is
    held as its ``fallback``, if that is known, else as ``overflow``: a close or a
    restore never fails on it. A new name's fallback is added with it while there is
    room. ``keep`` makes what is added to the table (interned names), so a hostile
    one that overflows is never kept."""

    def __init__(self, limit: int, *first: _N, overflow: _N, keep: Callable[[_N], _N]) -> None:
        self._limit = limit
        self._overflow = overflow
        self._keep = keep
        self.adopt(list(dict.fromkeys([*first, overflow])))

    # The index of each name in the table (what index answers for a name it knows).
    by_name: dict[_N, int]

    def adopt(self, names: list[_N]) -> None:
        """Take ``names`` as the table, in their order (another process's)."""
        self.names = list(names)
        self.by_name = {name: i for i, name in enumerate(self.names)}

    def index(self, name: _N, fallback: _N | None = None) -> int:
        i = self.by_name.get(name)
        if i is None:
            if fallback is not None and fallback != name and fallback not in self.by_name:
                self.index(fallback)  # there for when the table is full
            if len(self.names) > self._limit:
                known = self.by_name.get(fallback) if fallback is not None else None
                return known if known is not None else self.by_name[self._overflow]
            name = self._keep(name)
            i = self.by_name[name] = len(self.names)
            self.names.append(name)
        return i


def _interned(name: str | None) -> str | None:
    return name if name is None else sys.intern(name)


def _route(route: tuple[str, str | None]) -> tuple[str, str | None]:
    return sys.intern(route[0]), _interned(route[1])


# Indexes up to 0xFFFF (routes) and 0xFF (endings): the "H" and "B" of _PACKED. A
# route past the limit is its agent's with no DLQ recorded (the config decides), if
# that agent is known, else ("(other)", None): a name no command can give an agent
# (the command schema's pattern), so it is never taken for a configured one.
_ROUTES: _Names[tuple[str, str | None]] = _Names(0xFFFF, overflow=("(other)", None), keep=_route)
_ENDINGS: _Names[str | None] = _Names(0xFF, None, overflow="other", keep=_interned)

# The two tables as one process hands them to another: a restore process
# (bridge/engine/restore_process.py) packs closed Tasks with its tables' indexes.
ClosedNames: TypeAlias = tuple[list[tuple[str, str | None]], list[str | None]]


def closed_names() -> ClosedNames:
    """This process's route and ending tables, as they are now."""
    return list(_ROUTES.names), list(_ENDINGS.names)


def adopt_closed_names(names: ClosedNames) -> None:
    """Start this process's tables as another's (a restore process, before each
    read): the ClosedTasks packed here then index what that process's index, and the
    names it adds come after its own, in the order they were met."""
    _ROUTES.adopt(names[0])
    _ENDINGS.adopt(names[1])


def closed_unpacker(names: ClosedNames) -> Callable[[str, bytes], ClosedTask]:
    """What makes a ClosedTask here from its key and the bytes another process packed
    with the tables ``names``. Those tables began as this process's (adopt_closed_names)
    and only grew, so their indexes are this process's unless this one met other names
    meanwhile: then each packed head is rewritten with this process's indexes."""
    routes = [_ROUTES.index(route, fallback=(route[0], None)) for route in names[0]]
    endings = [_ENDINGS.index(ending) for ending in names[1]]
    if routes == list(range(len(routes))) and endings == list(range(len(endings))):
        return ClosedTask.unpacked

    def remapped(task_key: str, packed: bytes) -> ClosedTask:
        at, route, ended = _PACKED.unpack_from(packed)
        head = _PACKED.pack(at, routes[route], endings[ended])
        return ClosedTask.unpacked(task_key, head + packed[_PACKED.size :])

    return remapped


class ClosedTask:
    """A closed Task while its key is inside the dedupe window: only what dedupe
    and the command rules need (its key, digests of its last commandIds, how it
    ended, when), and the DLQ a late command about it goes to. About 100 bytes
    beside its key, where a live :class:`TaskRecord` costs kilobytes; it answers
    :func:`bridge.core.task.commands.decide` like one.

    ``closed_at`` is held in whole seconds, rounded up: a dedupe window is never
    shortened by it, and it is what the retention window keeps for this Task.

    After ``closed_retention_seconds`` its checkpoint is tombstoned and it is
    forgotten: a commandId repeated after that is new to the bridge.
    """

    __slots__ = ("_packed", "task_key")
    closed = True
    paused = False
    state = None

    def __init__(
        self,
        task_key: str,
        agent: str,
        ended_as: str | None,
        command_ids: list[str],
        closed_at: float,
        *,
        dlq_topic: str | None = None,
    ):
        self.task_key = task_key
        # Known names and a time within range are read inline, without the calls: a
        # restore makes one of these per closed checkpoint, up to millions
        # (bench/results/2026-12-07-restore-1m-closed.json).
        route = _ROUTES.by_name.get((agent, dlq_topic))
        if route is None:
            route = _ROUTES.index((agent, dlq_topic), fallback=(agent, None))
        seconds = math.ceil(closed_at) if 0.0 <= closed_at <= _MAX_SECONDS else _seconds(closed_at)
        ended = _ENDINGS.by_name.get(ended_as)
        if ended is None:
            ended = _ENDINGS.index(ended_as)
        self._packed = _PACKED.pack(seconds, route, ended) + bytes.fromhex("".join(command_ids))

    @classmethod
    def unpacked(cls, task_key: str, packed: bytes) -> ClosedTask:
        """The ClosedTask whose :attr:`packed` bytes are ``packed`` (indexes of this
        process's tables: see closed_unpacker)."""
        self = cls.__new__(cls)
        self.task_key = task_key
        self._packed = packed
        return self

    @property
    def packed(self) -> bytes:
        """All it holds beside its key, in one bytes object (indexes into this process's
        tables: closed_names)."""
        return self._packed

    @classmethod
    def of(cls, record: TaskRecord, closed_at: float) -> ClosedTask:
        return cls(
            record.task_key, record.agent, record.ended_as, record.command_ids, closed_at, dlq_topic=record.dlq_topic
        )

    def _head(self) -> tuple[int, int, int]:
        """(closed at in seconds, route index, ending index)."""
        seconds, route, ended = _PACKED.unpack_from(self._packed)
        return int(seconds), int(route), int(ended)

    @property
    def closed_at(self) -> float:
        return float(_AT.unpack_from(self._packed)[0])

    @closed_at.setter
    def closed_at(self, value: float) -> None:
        _, route, ended = self._head()
        self._packed = _PACKED.pack(_seconds(value), route, ended) + self._digests

    def dated(self, now: float) -> float:
        """When it closed, as held; a checkpoint from before ``closedAt`` was kept:
        closed ``now``, for a whole window."""
        at = self.closed_at
        if not at:
            self.closed_at = now
            at = self.closed_at
        return at

    @property
    def agent(self) -> str:
        return _ROUTES.names[self._head()[1]][0]

    @property
    def ended_as(self) -> str | None:
        return _ENDINGS.names[self._head()[2]]

    @property
    def dlq_topic(self) -> str | None:
        """Its agent's DLQ when it started (None: not recorded, or past the table's limit)."""
        return _ROUTES.names[self._head()[1]][1]

    @property
    def _digests(self) -> bytes:
        return self._packed[_PACKED.size :]

    @property
    def command_ids(self) -> list[str]:
        d = self._digests.hex()
        return [d[i : i + 16] for i in range(0, len(d), 16)]

    def seen(self, command_id: str) -> bool:
        return command_digest(command_id) in self.command_ids

    def __repr__(self) -> str:
        return f"ClosedTask({self.task_key!r}, {self.ended_as!r}, closed_at={self.closed_at})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClosedTask) and (self.task_key, self._packed) == (other.task_key, other._packed)

    __hash__ = None  # type: ignore[assignment]


_MAX_SECONDS = 0xFFFFFFFF  # what _PACKED's four bytes of seconds hold (until 2106)


def _seconds(at: float) -> int:
    """``at`` in whole seconds, rounded up, within what four bytes hold;
    0 if it is not a time at all (a restore takes that as "closed now")."""
    return min(max(0, math.ceil(at)), _MAX_SECONDS) if math.isfinite(at) else 0


@dataclass(frozen=True, slots=True)
class TaskRoute:
    """Where a Task started, kept with it (docs/gateway-protocol.md: "Store the Agent
    selector ... together"): its agent's endpoint, dialect and selector, its events
    and DLQ topics, and the W3C trace context of its start."""

    endpoint: str | None = None
    dialect: str | None = None
    agent_code: str | None = None
    events_topic: str | None = None
    dlq_topic: str | None = None
    traceparent: str | None = None
    binding: str | None = None


def new_task(
    task_key: str,
    agent: str,
    command_id: str,
    *,
    deadline: float | None,
    metadata: JSON | None,
    context_id: str | None = None,
    previous: TaskRecord | ClosedTask | None = None,
    route: TaskRoute | None = None,
) -> TaskRecord:
    """The record for a fresh start; remembers the previous Task's command ids."""
    record = TaskRecord(
        task_key=task_key,
        agent=agent,
        context_id=context_id,
        command_id=command_id,
        start_command_id=command_id,
        deadline=deadline,
        metadata=metadata,
        command_ids=list(previous.command_ids) if previous else [],
    )
    record.remember(command_id)
    if route is not None:
        record.routed(route)
    return record
