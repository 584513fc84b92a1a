"""`mlbaseline.redact`, the one redaction of URL and DSN secrets (its sinks: test_rel_secrets)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlbaseline.redact import (
    is_credential_name,
    redact_argv,
    redact_env,
    redact_text,
    redact_tree,
    redact_url,
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:SECRET@127.0.0.1:1/db", "postgresql://u:***@127.0.0.1:1/db"),
        ("postgresql+psycopg2://u:SECRET@h/db", "postgresql+psycopg2://u:***@h/db"),
        ("PostgreSQL://u:SECRET@h:abc/db", "PostgreSQL://u:***@h:abc/db"),  # a bad port too
        ("http://user:SECRET@127.0.0.1:8x/p", "http://user:***@127.0.0.1:8x/p"),
        ("https://u:p@ss@h/p", "https://u:***@h/p"),  # an unencoded @ in the password
        ("http://h/p?a=1&api_key=T&b=2", "http://h/p?a=1&api_key=***&b=2"),
        (
            "http://h/p?X-Api-Key=T&Token=U&monkey=ok",
            "http://h/p?X-Api-Key=***&Token=***&monkey=ok",
        ),
        ("https://b.s3/o?X-Amz-Signature=T&sig=U", "https://b.s3/o?X-Amz-Signature=***&sig=***"),
        ("http://h/cb#access_token=T&state=s", "http://h/cb#access_token=***&state=s"),
        ("sqlite:///tmp/h.sqlite?password=T", "sqlite:///tmp/h.sqlite?password=***"),
        ("http://a:b@[::1/x", "http://***/x"),  # urllib cannot read it: the authority goes
    ],
)
def test_secrets_are_masked(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "text",
    [
        "/tmp/a b/history.sqlite",
        "postgresql://u@h:5432/db",
        "http://h/p?key_id=1&page=2",
        "HTTP://H/Path?q=%20x",
        "",
    ],
)
def test_text_without_a_secret_is_unchanged(text):
    assert redact_url(text) == text


def test_credential_names_are_case_insensitive_and_match_as_a_suffix():
    assert all(map(is_credential_name, ["KEY", "x-api-key", "client_secret", "PWD", "sig"]))
    assert not any(map(is_credential_name, ["monkey", "keyboard", "page", "signal"]))


def test_free_text_is_redacted_wherever_a_url_or_a_conninfo_password_stands():
    text = "failed: 'postgresql://u:S1@h/db' (host=h password=S2 port=5) see http://h/?token=S3."
    out = redact_text(text)
    assert "S1" not in out and "S2" not in out and "S3" not in out
    assert "postgresql://u:***@h/db" in out and "password=***" in out


def test_a_config_tree_is_redacted_and_left_alone_otherwise():
    tree = {"history": {"store": "postgresql://u:S@h/db"}, "xs": ["http://h/?key=S", 3], "n": 1}
    out = redact_tree(tree)
    assert out == {
        "history": {"store": "postgresql://u:***@h/db"},
        "xs": ["http://h/?key=***", 3],
        "n": 1,
    }
    assert tree["history"]["store"] == "postgresql://u:S@h/db"  # a copy


def test_redaction_lives_in_one_place():
    """docs/ARCHITECTURE.md "The one redaction": no second masking of passwords in the package."""
    package = Path(__file__).resolve().parents[1] / "mlbaseline"
    found = [
        f"{path.relative_to(package)}:{n}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "redact.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"hide_password|render_as_string", line)
    ]
    assert found == []


def test_a_command_line_keeps_its_options_and_loses_its_credentials():
    """What mlb attach and mlb ab store of a script's command: the options' values stay, a
    credential's value (however the option is spelled) and a URL's password do not."""
    argv = ["python", "train.py", "--hf-token", "S1", "--api-key=S2", "wandb.api_key=S3"]
    argv += ["--db", "postgresql://u:S4@h/db", "--dsn", "host=h password=S5"]
    argv += ["--lr", "0.1", "--epochs=3", "-k", "5", "data=/x/key.csv", "--keyframes", "4"]
    out = redact_argv(argv)
    assert out == [
        "python", "train.py", "--hf-token", "***", "--api-key=***", "wandb.api_key=***",
        "--db", "postgresql://u:***@h/db", "--dsn", "host=h password=***",
        "--lr", "0.1", "--epochs=3", "-k", "5", "data=/x/key.csv", "--keyframes", "4",
    ]  # fmt: skip
    assert not any(f"S{i}" in " ".join(out) for i in range(1, 6))
    assert argv[3] == "S1"  # a copy: the command that runs is the user's


def test_environment_variables_named_like_credentials_are_masked():
    env = {"HF_TOKEN": "S1", "WANDB_API_KEY": "S2", "AWS_SECRET_ACCESS_KEY": "S3"}
    env |= {"DB_URL": "postgresql://u:S4@h/d", "OMP_NUM_THREADS": "4", "MLB_X": "1"}
    assert redact_env(env) == {
        "HF_TOKEN": "***",
        "WANDB_API_KEY": "***",
        "AWS_SECRET_ACCESS_KEY": "***",
        "DB_URL": "postgresql://u:***@h/d",
        "OMP_NUM_THREADS": "4",
        "MLB_X": "1",
    }


def test_the_attached_commands_are_stored_redacted(tmp_path: Path):
    from mlbaseline.runners.ab_process import Arm
    from mlbaseline.runners.attach import script_facts
    from mlbaseline.runners.attach_ab import ScriptArm

    cmd = ["python", "train.py", "--hf-token", "SECRET"]
    assert script_facts(cmd)["command"] == ["python", "train.py", "--hf-token", "***"]
    arm = ScriptArm(tuple(cmd), tmp_path, {"HF_TOKEN": "SECRET", "SEED": "1"})
    assert "SECRET" not in str(arm.describe()) and arm.describe()["env"]["SEED"] == "1"
    assert arm.command[-1] == "SECRET"  # what runs
    from mlbaseline.config import resolve

    mlb = Arm(resolve(None), prefix=("mlb", "--token", "SECRET"), env={"API_KEY": "SECRET"})
    assert "SECRET" not in str(mlb.describe())
