"""The config's topics against what the cluster shows (bridge.kafka.layout): every problem
at once, under the key that names the topic."""

from __future__ import annotations

from bridge.config.model import AgentConfig, Config, KafkaConfig
from bridge.kafka.layout import named, problems
from bridge.kafka.topics import TASKS_TOPIC_CONFIG, Survey, wanted

COMPACT = {"cleanup.policy": "compact", "retention.ms": "604800000", "retention.bytes": "-1"}


def config() -> Config:
    kafka = KafkaConfig(commands_topic="c", events_topic="e", checkpoints_topic="cp", dlq_topic="d", tasks_topic="t")
    routed = AgentConfig("w", "http://w", events_topic="w.evnts", dlq_topic="w.d", tasks_topic="w.t")
    return Config(kafka=kafka, agents={"w": routed})


def test_each_topic_is_named_by_the_first_key_that_names_it() -> None:
    assert named(config()) == {
        "c": "kafka.commands_topic",
        "cp": "kafka.checkpoints_topic",
        "e": "kafka.events_topic",
        "d": "kafka.dlq_topic",
        "t": "kafka.tasks_topic",
        "w.evnts": "agents.w.events_topic",
        "w.d": "agents.w.dlq_topic",
        "w.t": "agents.w.tasks_topic",
    }
    assert set(named(config())) == set(wanted(config()))  # notifications only when an agent pushes


def test_topics_as_they_should_be_have_no_problem() -> None:
    cfg = config()
    counts = dict.fromkeys(wanted(cfg), 6)
    shown = Survey(sorted(counts), counts, {"cp": COMPACT, "t": COMPACT, "w.t": COMPACT})
    assert problems(cfg, shown) == []


def test_every_problem_at_once_a_missing_topic_with_the_nearest_name_there_is() -> None:
    cfg = config()
    counts = {t: 6 for t in wanted(cfg) if t != "w.evnts"} | {"w.t": 3}
    existing = [*counts, "w.events", "__consumer_offsets"]
    deleting = {**COMPACT, "cleanup.policy": "delete"}
    shown = Survey(existing, counts, {"cp": deleting, "t": COMPACT, "w.t": 61})
    assert [str(p) for p in problems(cfg, shown)] == [
        "agents.w.events_topic: topic 'w.evnts' does not exist (did you mean 'w.events'?); `bridge topics` creates it",
        "agents.w.tasks_topic: topic 'w.t' has 3 partitions but the commands topic 'c' has 6: they must be "
        "co-partitioned (same count)",
        "kafka.checkpoints_topic: topic 'cp' has cleanup.policy=delete, not compact: it must be compacted "
        "(kafka-configs.sh --alter --entity-type topics --entity-name cp --add-config cleanup.policy=compact)",
        "agents.w.tasks_topic: cannot read topic 'w.t''s cleanup.policy (error 61): make sure it is compact",
    ]
    assert [p.warning for p in problems(cfg, shown)] == [False, False, False, True]


def test_the_configs_own_topics_and_kafkas_are_never_suggested() -> None:
    cfg = config()
    counts = {t: 6 for t in wanted(cfg) if t != "e"}
    # "e" is missing; "d" and "c" are this config's and "__e" Kafka's: no name is near enough to offer.
    shown = Survey([*counts, "__e"], counts, dict.fromkeys(("cp", "t", "w.t"), COMPACT))
    assert [str(p) for p in problems(cfg, shown)] == [
        "kafka.events_topic: topic 'e' does not exist; `bridge topics` creates it"
    ]


def test_the_task_table_is_wanted_compacted() -> None:
    assert wanted(config())["t"]["cleanup.policy"] == TASKS_TOPIC_CONFIG["cleanup.policy"] == "compact"
