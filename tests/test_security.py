"""Security rules, checked on the source itself (issue: reliability and security)."""

import re
from pathlib import Path

import pytest

from mlbaseline import envinfo
from mlbaseline.measure.gpu import NullProbe

PACKAGE = Path(__file__).resolve().parent.parent / "mlbaseline"
SOURCES = sorted(PACKAGE.rglob("*.py"))

FORBIDDEN = {
    "yaml.load without SafeLoader": re.compile(r"yaml\.load\((?![^)]*SafeLoader)"),
    "yaml.unsafe_load": re.compile(r"yaml\.(unsafe_load|full_load)\("),
    "shell=True": re.compile(r"shell\s*=\s*True"),
    "os.system": re.compile(r"\bos\.system\("),
    "pickle loads": re.compile(r"\bpickle\.loads?\("),
    "eval/exec": re.compile(r"(?<![\w.])(eval|exec)\("),
    "GPU reconfiguration": re.compile(r"nvmlDeviceSet|nvidia-smi\s+(-r|--gpu-reset|-pm|-ac|-lgc)"),
    "privilege escalation": re.compile(r"\bsudo\b|privileged:\s*true"),
}


def test_sources_found():
    assert len(SOURCES) > 10


@pytest.mark.parametrize("rule", sorted(FORBIDDEN))
def test_no_unsafe_calls(rule):
    pattern = FORBIDDEN[rule]
    hits = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in SOURCES
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert not hits, f"{rule}: {hits}"


def test_torch_load_always_weights_only():
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for match in re.finditer(r"torch\.load\(", text):
            call = text[match.start() : text.find(")", match.start()) + 1]
            assert "weights_only=True" in call, f"{path.name}: {call}"


def test_fingerprint_records_only_allowlisted_env(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("HF_TOKEN", "hf_abcdef")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    fp = envinfo.fingerprint({}, NullProbe(), device="cpu")
    text = repr(fp)
    assert "s3cr3t-value" not in text and "hf_abcdef" not in text
    assert fp["informational"]["env"] == {"OMP_NUM_THREADS": "2"}
