"""glibc malloc tuning of the measuring process: applied once, recorded, refused clearly."""

from __future__ import annotations

import platform

import pytest

from mlbaseline.measure import allocator


class FakeLibc:
    def __init__(self, refuse: int | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.refuse = refuse

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 0 if param == self.refuse else 1


def test_every_setting_is_applied_and_recorded() -> None:
    libc = FakeLibc()
    out = allocator.tune(True, libc)
    assert out["malloc_tuning"] is True
    assert {p for p, _ in libc.calls} == {p for p, _ in allocator.SETTINGS.values()}
    assert out["settings"]["M_MMAP_THRESHOLD"] == 256 * 2**20


def test_a_refused_setting_is_said() -> None:
    out = allocator.tune(True, FakeLibc(refuse=allocator.M_ARENA_MAX))
    assert out["malloc_tuning"] is False and "M_ARENA_MAX" in out["reason"]


def test_off_changes_nothing() -> None:
    libc = FakeLibc()
    out = allocator.tune(False, libc)
    assert out == {"malloc_tuning": False, "reason": "workload.malloc_tuning: false"}
    assert libc.calls == []


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="needs glibc")
def test_real_glibc_accepts_the_settings() -> None:
    assert allocator.tune(True)["malloc_tuning"] is True


def test_ab_arms_must_agree_on_the_allocator() -> None:
    from mlbaseline.config import resolve
    from mlbaseline.errors import UsageError
    from mlbaseline.runners.ab import run_ab

    a = resolve(overrides={"workload.malloc_tuning": True})
    b = resolve(overrides={"workload.malloc_tuning": False})
    with pytest.raises(UsageError, match="--processes"):
        run_ab(a, b, pairs=2)
