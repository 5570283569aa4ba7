"""bridge.identity.sources: secrets from variables and from files that Kubernetes rotates in place."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from bridge.config.model import ConfigError, Secret, read_secret, secret_text
from bridge.identity import sources
from bridge.identity.sources import RECHECK_SECONDS, FileSecret, FixedSecret, bearer, secret_from


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def mounted(root: Path, value: str, version: int) -> Path:
    """A Secret volume as the kubelet writes it: ``token -> ..data/token``,
    ``..data -> ..<version>``, swapped by renaming a new ``..data`` link over the old."""
    target = root / f"..{version}"
    target.mkdir()
    (target / "token").write_text(value + "\n")
    tmp = root / "..data_tmp"
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "..data")
    link = root / "token"
    if not link.is_symlink():
        link.symlink_to("..data/token")
    return link


def test_a_rotated_kubernetes_secret_is_read_again_within_a_second(tmp_path: Path) -> None:
    clock = Clock()
    path = mounted(tmp_path, "first", 1)
    secret = FileSecret("agents.a.token_file", str(path), clock=clock)
    assert secret.get().get() == "first"
    mounted(tmp_path, "second", 2)
    assert secret.get().get() == "first"  # not looked at again within the second
    clock.now += RECHECK_SECONDS
    assert secret.get().get() == "second"


def test_a_refused_secret_is_looked_for_again_at_once(tmp_path: Path) -> None:
    clock = Clock()
    path = mounted(tmp_path, "first", 1)
    secret = FileSecret("agents.a.token_file", str(path), clock=clock)
    secret.get()
    mounted(tmp_path, "second", 2)
    secret.stale()
    assert secret.get().get() == "second"


def test_an_unchanged_file_is_looked_at_but_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    path = tmp_path / "token"
    path.write_text("same")
    secret = FileSecret("agents.a.token_file", str(path), clock=clock)
    reads: list[str] = []

    def counted(at: str, p: str) -> Secret:
        reads.append(p)
        return Secret("read again")

    monkeypatch.setattr(sources, "secret_file", counted)
    for _ in range(5):
        clock.now += RECHECK_SECONDS
        assert secret.get().get() == "same"
    assert reads == []


def test_a_rotation_to_a_broken_value_keeps_the_last_good_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    path = mounted(tmp_path, "good", 1)
    secret = FileSecret("agents.a.token_file", str(path), clock=clock)
    mounted(tmp_path, "bad\x01value", 2)
    clock.now += RECHECK_SECONDS
    assert secret.get().get() == "good"
    assert "control character" in caplog.text
    assert "bad" not in caplog.text


def test_a_file_that_disappears_mid_rotation_keeps_the_last_value(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "token"
    path.write_text("kept")
    secret = FileSecret("agents.a.token_file", str(path), clock=clock)
    path.unlink()
    clock.now += RECHECK_SECONDS
    assert secret.get().get() == "kept"


@pytest.mark.parametrize("value", ["tok\nen", "token\r", "tab\there", "nul\x00", "del\x7f", "esc\x1b[2J"])
def test_a_secret_with_a_control_character_is_refused_naming_the_key_not_the_value(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        secret_text("agents.a.token_env", value)
    assert str(caught.value).startswith("agents.a.token_env: ")
    assert value not in str(caught.value)


def test_a_variable_ending_in_a_newline_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value pasted with its newline into a Secret's stringData reaches the variable whole."""
    monkeypatch.setenv("AGENT_TOKEN", "abc\n")
    with pytest.raises(ConfigError, match=r"^agents\.a\.token_env: the secret holds a control character"):
        read_secret("agents.a", "token", None, "AGENT_TOKEN")


def test_a_file_ending_in_a_newline_is_fine(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("abc\n")
    secret = read_secret("agents.a", "token", str(tmp_path / "t"), None)
    assert secret is not None and secret.get() == "abc"


def test_a_secret_file_that_is_not_utf8_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "t").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        read_secret("agents.a", "token", str(tmp_path / "t"), None)


def test_secret_from_a_variable_is_fixed_and_from_a_file_follows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("K", "v")
    assert isinstance(secret_from("kafka", "sasl_password", None, "K"), FixedSecret)
    (tmp_path / "t").write_text("v")
    assert isinstance(secret_from("kafka", "sasl_password", str(tmp_path / "t"), None), FileSecret)
    assert secret_from("kafka", "sasl_password", None, None) is None


def test_a_bearer_refusal_makes_its_file_be_looked_at_again(tmp_path: Path) -> None:
    path = mounted(tmp_path, "old", 1)
    source = bearer(FileSecret("agents.a.token_file", str(path)), "agents.a")
    old = asyncio.run(source.token())
    mounted(tmp_path, "new", 2)
    source.refused(old)
    assert asyncio.run(source.token()).get() == "new"


def test_a_bearer_refusal_of_a_token_already_replaced_changes_nothing() -> None:
    source = bearer(FixedSecret(Secret("current")), "agents.a")
    source.refused(Secret("older"))
    assert asyncio.run(source.token()).get() == "current"
