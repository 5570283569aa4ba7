"""bridge/kafka/epochs.py without Kafka: which requests put an epoch in doubt, and the
bump's answers one at a time. A fake client answers; the transaction manager is
aiokafka's own. tests/integration/test_delayed_transactions.py sends the faults over
real sockets to a real broker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, NodeNotReadyError, ProducerFenced
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.protocol.transaction import AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest
from aiokafka.structs import TopicPartition

from bridge.kafka.epochs import Epochs


class Client:
    """Answers InitProducerId with ``answers`` (error code, epoch) in turn; other
    requests with ``others`` (an exception to raise, or None)."""

    def __init__(self, answers: list[tuple[int, int] | BaseException] | None = None) -> None:
        self.answers = list(answers or [])
        self.asked: list[tuple[int, Any]] = []
        self.lookups = 0
        self.others: BaseException | None = None

    async def send(self, node_id: int, request: Any, **_: Any) -> Any:
        self.asked.append((node_id, request))
        if request.API_KEY != 22:
            if self.others is not None:
                raise self.others
            return None
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        code, epoch = answer
        return SimpleNamespace(error_code=code, producer_id=7, producer_epoch=epoch)

    async def coordinator_lookup(self, *_: Any) -> int:
        self.lookups += 1
        return 100 + self.lookups


def producer(client: Client) -> Any:
    manager = TransactionManager("tx-cmds-0", 30_000)
    manager.set_pid_and_epoch(7, 3)
    manager.increment_sequence_number(TopicPartition("events", 0), 12)
    return SimpleNamespace(client=client, _txn_manager=manager)


def epochs(every: bool = False) -> Epochs:
    return Epochs("tx-cmds-0", 30_000, every_transaction=every, backoff_s=0)


async def test_a_transactional_request_whose_send_failed_puts_the_epoch_in_doubt() -> None:
    client, e = Client(), epochs()
    p = producer(client)
    e.watch(p)
    client.others = KafkaConnectionError("cut")
    with pytest.raises(KafkaConnectionError):
        await p.client.send(1, EndTxnRequest("tx-cmds-0", 7, 3, 1))
    assert e.doubted and e.doubts == {"EndTxn": 1}


async def test_a_request_never_sent_and_one_answered_are_no_doubt() -> None:
    client, e = Client(), epochs()
    p = producer(client)
    e.watch(p)
    await p.client.send(1, AddPartitionsToTxnRequest("tx-cmds-0", 7, 3, [("events", [0])]))
    client.others = NodeNotReadyError("not connected")
    with pytest.raises(NodeNotReadyError):
        await p.client.send(1, AddPartitionsToTxnRequest("tx-cmds-0", 7, 3, [("events", [0])]))
    assert not e.doubted


async def test_a_lost_init_producer_id_is_no_doubt_a_bump_would_clear() -> None:
    # A late InitProducerId fences whatever epoch there is: the diagnosis's business.
    client, e = Client([KafkaConnectionError("cut")]), epochs()
    p = producer(client)
    e.watch(p)
    with pytest.raises(KafkaConnectionError):
        await p.client.send(1, InitProducerIdRequest("tx-cmds-0", 30_000))
    assert not e.doubted


async def test_without_a_doubt_no_epoch_is_asked_for() -> None:
    client, e = Client(), epochs()
    p = producer(client)
    e.watch(p)
    assert await e.before_transaction(p) is False
    assert client.asked == []


async def test_after_a_doubt_the_epoch_moves_on_and_the_sequences_start_again() -> None:
    client, e = Client([(0, 4)]), epochs()
    p = producer(client)
    e.watch(p)
    client.others = KafkaConnectionError("cut")
    with pytest.raises(KafkaConnectionError):
        await p.client.send(1, EndTxnRequest("tx-cmds-0", 7, 3, 1))
    assert await e.before_transaction(p) is True
    (_, asked) = client.asked[-1]
    built = asked.build(type(asked)._CLASSES[0])
    # KIP-360: the coordinator bumps only if this producer's epoch is still the current one.
    assert (built.transactional_id, built.producer_id, built.producer_epoch) == ("tx-cmds-0", 7, 3)
    manager = p._txn_manager
    assert (manager.producer_id, manager.producer_epoch) == (7, 4)
    assert manager.sequence_number(TopicPartition("events", 0)) == 0
    assert not e.doubted and e.bumps == 1
    assert await e.before_transaction(p) is False  # until the next doubt


async def test_a_busy_or_moving_coordinator_is_asked_again() -> None:
    # CONCURRENT_TRANSACTIONS while the last commit's markers are written; NOT_COORDINATOR:
    # looked up again; a lost connection: asked again with the same epoch (KIP-360).
    client, e = Client([(51, -1), (16, -1), KafkaConnectionError("cut"), (0, 4)]), epochs(every=True)
    p = producer(client)
    e.watch(p)
    assert await e.before_transaction(p) is True
    assert p._txn_manager.producer_epoch == 4
    assert client.lookups == 3
    assert [r.build(type(r)._CLASSES[0]).producer_epoch for _, r in client.asked] == [3, 3, 3, 3]


async def test_a_newer_epoch_at_the_coordinator_is_a_fence() -> None:
    for code in (47, 90):
        client, e = Client([(code, -1)]), epochs(every=True)
        p = producer(client)
        with pytest.raises(ProducerFenced):
            await e.before_transaction(p)
        assert p._txn_manager.producer_epoch == 3


async def test_every_transaction_mode_bumps_without_a_doubt() -> None:
    client, e = Client([(0, 4), (0, 5)]), epochs(every=True)
    p = producer(client)
    assert await e.before_transaction(p) and await e.before_transaction(p)
    assert p._txn_manager.producer_epoch == 5 and e.bumps == 2
