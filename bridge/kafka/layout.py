"""The topics a config names, against what the cluster shows of them: every problem at
once, one per line, each under the config key that names the topic
(``bridge config check --live``).

Pure: :func:`bridge.kafka.topics.survey` asks the cluster; the rules are the ones
``bridge topics`` and ``bridge run`` apply (:func:`~bridge.kafka.topics.wanted`,
:func:`~bridge.kafka.topics.co_partitioned`, :func:`~bridge.kafka.topics.cleanup_problem`),
told here all at once instead of as the first that stops a start. A topic that is
missing is most often misspelt in the config, not yet to be created: it is given
the nearest topic the cluster has, as a misspelt key is given the nearest key.
"""

from __future__ import annotations

from bridge.config.model import Config
from bridge.config.rules import Problem, suggest
from bridge.kafka.topics import Survey, cleanup_problem, co_partitioned, wanted


def named(config: Config) -> dict[str, str]:
    """Each topic the bridge uses, and the (first) config key that names it."""
    roles = ("commands", "checkpoints", "events", "dlq", "tasks", "notifications")
    keys = [(getattr(config.kafka, f"{role}_topic"), f"kafka.{role}_topic") for role in roles]
    for name, a in sorted(config.agents.items()):
        keys += [
            (t, f"agents.{name}.{role}_topic")
            for role in ("events", "dlq", "tasks")
            if (t := getattr(a, f"{role}_topic"))
        ]
    used = wanted(config)
    out: dict[str, str] = {}
    for topic, key in keys:
        if topic in used:
            out.setdefault(topic, key)
    return out


def problems(config: Config, shown: Survey) -> list[Problem]:
    """What is wrong with the config's topics as ``shown``: missing (with the nearest
    name there is), not co-partitioned with the commands topic, not compacted."""
    keys = named(config)
    # Not suggested: Kafka's own topics, and the config's other topics (a misspelt
    # events topic is not meant to be the commands topic).
    others = [t for t in shown.existing if not t.startswith("__") and t not in keys]
    out: list[Problem] = []
    for topic, key in keys.items():
        if topic not in shown.counts:
            out.append(
                Problem(key, f"topic {topic!r} does not exist{suggest(topic, others)}; `bridge topics` creates it")
            )
    commands = config.kafka.commands_topic
    want = shown.counts.get(commands)
    for topic in co_partitioned(config):
        n = shown.counts.get(topic)
        if want is not None and n is not None and n != want:
            message = (
                f"topic {topic!r} has {n} partitions but the commands topic {commands!r} has {want}: "
                "they must be co-partitioned (same count)"
            )
            out.append(Problem(keys[topic], message))
    for topic, values in sorted(shown.cleanup.items()):
        if isinstance(values, int):
            message = f"cannot read topic {topic!r}'s cleanup.policy (error {values}): make sure it is compact"
            out.append(Problem(keys[topic], message, warning=True))
        elif (why := cleanup_problem(values)) is not None:
            message = (
                f"topic {topic!r} has {why}: it must be compacted (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name {topic} --add-config cleanup.policy=compact)"
            )
            out.append(Problem(keys[topic], message))
    return out
