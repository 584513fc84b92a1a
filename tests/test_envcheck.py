"""env-check: every check with a fake GPU probe, injected readings and /proc + cgroup fixtures."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from mlbaseline import envinfo
from mlbaseline.config import Config, EnvCheckConfig, GoldenConfig, WorkloadConfig
from mlbaseline.errors import ConfigError, UsageError
from mlbaseline.measure.gpu import GpuInfo, GpuProbeError, GpuSample, NullProbe
from mlbaseline.runners import envcheck as ec
from mlbaseline.runners.envcheck import HostReadings

FIXTURES = Path(__file__).parent / "fixtures" / "envcheck"
GiB = 1024**3


# ---------------------------------------------------------------- fakes


class FakeProbe:
    """A GpuProbe with canned devices; `error` makes devices() fail like a broken NVML."""

    def __init__(self, *devices: GpuInfo, driver: str | None = "550.54.15", error: str = ""):
        self._devices = list(devices)
        self._driver = driver
        self._error = error
        self.closed = False

    def available(self) -> tuple[bool, str]:
        return True, ""

    def driver_version(self) -> str | None:
        return self._driver

    def devices(self) -> list[GpuInfo]:
        if self._error:
            raise GpuProbeError(self._error)
        return list(self._devices)

    def sample(self, index: int) -> GpuSample:
        d = self._devices[index]
        return GpuSample(index, 0.0, d.memory_used_bytes, d.temperature_c, 60.0, 1400.0)

    def close(self) -> None:
        self.closed = True


def gpu(**changes) -> GpuInfo:
    healthy = GpuInfo(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-11111111-2222",
        memory_total_bytes=80 * 10**9,
        memory_used_bytes=int(0.5e9),
        temperature_c=38.0,
        throttle_reasons=["gpu_idle"],
        persistence_mode=True,
        mig_mode=False,
        ecc_enabled=True,
        compute_processes=0,
    )
    return dataclasses.replace(healthy, **changes)


def times(busy: int, idle: int) -> envinfo.CpuTimes:
    return envinfo.CpuTimes(busy=busy, idle=idle)


HEALTHY_HOST = HostReadings(
    cpu_before={"cpu": times(1000, 9000), "cpu0": times(500, 4500), "cpu1": times(500, 4500)},
    cpu_after={"cpu": times(1002, 9198), "cpu0": times(501, 4599), "cpu1": times(501, 4599)},
    window_s=0.5,
    loadavg=(0.1, 0.1, 0.1),
    logical_cpus=8,
    affinity=list(range(8)),
    cgroup_version=2,
    governors={i: "performance" for i in range(8)},
    turbo=(False, "intel_pstate/no_turbo"),
    meminfo={"MemTotal": 256 * GiB, "MemAvailable": 200 * GiB, "SwapTotal": 0, "SwapFree": 0},
    swaps_used=0,
)

SW_CUDA = {
    "torch": "2.14.1+cu130",
    "torchvision": "0.29.1+cu130",
    "cuda_build": "13.0",
    "cuda_available": True,
    "cudnn": "92400",
    "cudnn_deterministic": False,
    "cudnn_benchmark": False,
    "tf32_matmul": False,
    "tf32_cudnn": True,
    "torch_threads": 8,
    "torch_interop_threads": 8,
    "deterministic_algorithms": False,
}
SW_CPU = SW_CUDA | {
    "torch": "2.14.1+cpu",
    "torchvision": "0.29.1+cpu",
    "cuda_build": None,
    "cuda_available": False,
    "cudnn": None,
}


def config(batch: int = 64, device: str = "auto", **env_check) -> Config:
    return Config(
        golden=GoldenConfig(batch_size=batch),
        workload=WorkloadConfig(device=device),
        env_check=EnvCheckConfig(**env_check),
    )


def by_name(checks) -> dict:
    return {c.name: c for c in checks}


def run(probe, cfg: Config | None = None, host: HostReadings = HEALTHY_HOST, sw=None):
    return ec.run_env_check(cfg or config(), probe, readings=host, software=sw or SW_CUDA)


# ---------------------------------------------------------------- GPU


def test_healthy_gpu_passes_everything():
    result = run(FakeProbe(gpu()))
    checks = by_name(result.verdict.checks)
    assert checks["gpu.present"].status == "pass" and checks["gpu.present"].value == 1
    for kind in ec.GPU_CHECK_KINDS[1:]:
        assert checks[f"gpu0.{kind}"].status == "pass", checks[f"gpu0.{kind}"]
    assert checks["gpu0.persistence"].value == "on" and checks["gpu0.mig"].value == "off"
    assert checks["gpu0.ecc"].value == "on"
    assert checks["gpu0.throttle"].value == ["gpu_idle"]  # idle is listed, not a throttle
    assert result.verdict.status == "pass"
    assert [c.status for c in result.verdict.checks if c.status in ("warn", "fail")] == []


def test_hot_gpu_fails_and_is_only_a_warning_for_a_cpu_run():
    hot = FakeProbe(gpu(temperature_c=78.0))
    check = by_name(run(hot).verdict.checks)["gpu0.temperature"]
    assert (check.status, check.value, check.threshold) == ("fail", 78.0, 65.0)
    assert "cool" in check.message
    cpu_run = by_name(run(hot, config(device="cpu")).verdict.checks)["gpu0.temperature"]
    assert cpu_run.status == "warn" and "workload.device is cpu" in cpu_run.message
    limit = by_name(run(hot, config(gpu_max_temp_c=80)).verdict.checks)["gpu0.temperature"]
    assert limit.status == "pass"  # the threshold comes from config


def test_busy_gpu_memory_fails():
    check = by_name(run(FakeProbe(gpu(memory_used_bytes=16 * 10**9))).verdict.checks)
    check = check["gpu0.memory_used"]
    assert check.status == "fail"
    assert check.value == pytest.approx(0.2) and check.threshold == pytest.approx(0.10)
    assert "CUDA_VISIBLE_DEVICES" in check.message


def test_other_compute_processes_fail():
    check = by_name(run(FakeProbe(gpu(compute_processes=2))).verdict.checks)["gpu0.processes"]
    assert (check.status, check.value, check.threshold) == ("fail", 2, 0)


def test_small_gpu_memory_scales_with_batch_size():
    small = FakeProbe(gpu(memory_total_bytes=8 * 10**9, memory_used_bytes=0))
    at64 = by_name(run(small, config(batch=64)).verdict.checks)["gpu0.memory_total"]
    assert at64.status == "fail" and at64.threshold == pytest.approx(12e9)
    assert "12 GB × batch 64/64" in at64.message and "golden.batch_size" in at64.message
    at16 = by_name(run(small, config(batch=16)).verdict.checks)["gpu0.memory_total"]
    assert at16.status == "pass" and at16.threshold == pytest.approx(3e9)
    assert "batch 16/64" in at16.message


@pytest.mark.parametrize(
    ("reasons", "status"),
    [
        (["gpu_idle"], "pass"),
        ([], "pass"),
        (["applications_clocks", "sync_boost"], "pass"),
        (["sw_power_cap"], "warn"),
        (["hw_thermal"], "fail"),
        (["gpu_idle", "hw_slowdown"], "fail"),
        (["sw_thermal"], "fail"),
    ],
)
def test_throttle_reasons(reasons, status):
    check = by_name(run(FakeProbe(gpu(throttle_reasons=reasons))).verdict.checks)
    assert check["gpu0.throttle"].status == status
    assert check["gpu0.throttle"].value == reasons


def test_no_driver_skips_every_gpu_check_with_the_reason():
    result = run(NullProbe("no NVIDIA driver (NVMLError_LibraryNotFound)"), sw=SW_CPU)
    gpu_checks = [c for c in result.verdict.checks if c.name.startswith("gpu")]
    assert [c.name for c in gpu_checks] == [f"gpu.{k}" for k in ec.GPU_CHECK_KINDS]
    assert {c.status for c in gpu_checks} == {"skip"}
    assert all("NVMLError_LibraryNotFound" in c.message for c in gpu_checks)
    checks = by_name(result.verdict.checks)
    assert checks["software.driver"].status == "skip"
    # a CPU-only torch is fine on a CPU-only machine
    assert checks["software.torch_build"].status == "pass"
    assert result.verdict.status == "pass"


def test_nvml_error_is_a_warning_not_a_crash():
    checks, gpus = ec.gpu_checks(config(), FakeProbe(error="nvmlDeviceGetCount: Unknown Error"))
    assert gpus == []
    assert checks[0].name == "gpu.present" and checks[0].status == "warn"
    assert "Unknown Error" in checks[0].message
    assert {c.status for c in checks[1:]} == {"skip"}


def test_cuda_visible_devices_narrows_the_checked_gpus():
    probe = FakeProbe(gpu(), gpu(index=1, uuid="GPU-99999999", temperature_c=90.0))
    checks, shown = ec.gpu_checks(config(), probe, {"CUDA_VISIBLE_DEVICES": "0"})
    assert [d.index for d in shown] == [0]
    assert "gpu1.temperature" not in by_name(checks)
    checks, shown = ec.gpu_checks(config(), probe, {"CUDA_VISIBLE_DEVICES": "GPU-9999"})
    assert [d.index for d in shown] == [1]
    assert by_name(checks)["gpu1.temperature"].status == "fail"
    checks, shown = ec.gpu_checks(config(), probe, {"CUDA_VISIBLE_DEVICES": ""})
    assert shown == [] and {c.status for c in checks} == {"skip"}
    assert "hides all 2 GPU(s)" in checks[0].message
    both = by_name(ec.gpu_checks(config(), probe)[0])
    assert both["gpu.present"].value == 2 and both["gpu1.temperature"].status == "fail"


def test_information_checks_skip_when_not_reported():
    d = gpu(temperature_c=None, persistence_mode=None, mig_mode=None, ecc_enabled=None)
    checks = by_name(ec.device_checks(config(), d))
    for kind in ("temperature", "persistence", "mig", "ecc"):
        assert checks[f"gpu0.{kind}"].status == "skip"
    info = by_name(ec.device_checks(config(), gpu(mig_mode=True, persistence_mode=False)))
    assert info["gpu0.mig"].status == "pass" and "same slice" in info["gpu0.mig"].message
    assert info["gpu0.persistence"].value == "off"


# ---------------------------------------------------------------- /proc and cgroup fixtures


def fixture_root(tmp_path: Path, name: str, dest: str | None = None) -> Path:
    """A writable copy of a fixture tree."""
    root = tmp_path / (dest or name)
    shutil.copytree(FIXTURES / name, root)
    return root


def read_fixture(
    tmp_path: Path, name: str, affinity: list[int], dest: str | None = None
) -> HostReadings:
    """read_host over a fixture tree; the 'sleep' swaps in the later /proc/stat instead of
    waiting, so the idle window is exact and instant."""
    root = fixture_root(tmp_path, name, dest)
    slept: list[float] = []

    def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        shutil.copy(root / "proc/stat.later", root / "proc/stat")

    host = ec.read_host(root, 0.5, fake_sleep, affinity=affinity, env={})
    assert slept == [0.5]
    return host


def test_cgroup_v1_readers():
    root = FIXTURES / "cgroup_v1"
    assert envinfo.cgroup_version(root) == 1
    # the tightest limit on the way up: own cgroup 16 GiB, parent 32 GiB, root unlimited
    assert envinfo.cgroup_memory_limit(root) == 16 * GiB
    assert envinfo.cgroup_memory_usage(root) == 4 * GiB
    assert envinfo.cgroup_cpu_quota(root) == pytest.approx(2.5)
    assert envinfo.turbo_state(root) == (True, "intel_pstate/no_turbo")
    assert envinfo.cpu_governors(root) == {
        0: "powersave",
        1: "powersave",
        2: "performance",
        3: "performance",
    }
    assert envinfo.loadavg(root) == (3.2, 2.1, 1.0)
    assert envinfo.swaps_used(root) == 1 * GiB
    assert envinfo.meminfo(root)["MemTotal"] == 64 * GiB


def test_cgroup_v2_readers():
    root = FIXTURES / "cgroup_v2"
    assert envinfo.cgroup_version(root) == 2
    assert envinfo.cgroup_memory_limit(root) == 8 * GiB  # the parent says "max"
    assert envinfo.cgroup_memory_usage(root) == 2 * GiB
    assert envinfo.cgroup_cpu_quota(root) == pytest.approx(2.0)
    assert envinfo.turbo_state(root) == (True, "cpufreq/boost")
    assert envinfo.swaps_used(root) == 0


def test_cgroup_namespace_falls_back_to_the_mount(tmp_path):
    """Inside a container the mount is the container's own cgroup and /proc/self/cgroup may
    name a host path that does not exist under it."""
    root = fixture_root(tmp_path, "cgroup_v2")
    cg = root / "sys/fs/cgroup"
    (cg / "memory.max").write_text("4294967296\n")
    (cg / "cpu.max").write_text("150000 100000\n")
    (root / "proc/self/cgroup").write_text("0::/kubepods/pod42/container7\n")
    assert envinfo.cgroup_dirs(root, "memory") == [cg]
    assert envinfo.cgroup_memory_limit(root) == 4 * GiB
    assert envinfo.cgroup_cpu_quota(root) == pytest.approx(1.5)
    (root / "proc/self/cgroup").write_text("0::/\n")
    assert envinfo.cgroup_memory_limit(root) == 4 * GiB
    (cg / "memory.max").write_text("max\n")
    assert envinfo.cgroup_memory_limit(root) is None


def test_unlimited_cgroups_read_as_none(tmp_path):
    root = fixture_root(tmp_path, "cgroup_v1")
    own = root / "sys/fs/cgroup/memory/docker/abc123/memory.limit_in_bytes"
    own.write_text("9223372036854771712\n")
    (root / "sys/fs/cgroup/memory/docker/memory.limit_in_bytes").write_text("-1\n")
    assert envinfo.cgroup_memory_limit(root) is None
    (root / "sys/fs/cgroup/cpu,cpuacct/docker/abc123/cpu.cfs_quota_us").write_text("-1\n")
    assert envinfo.cgroup_cpu_quota(root) is None


def test_cpu_times_ignore_guest_and_count_iowait_as_idle():
    stat = envinfo.cpu_times(FIXTURES / "cgroup_v1")
    # user 1000 nice 10 system 300 idle 8000 iowait 50 irq 5 softirq 5 steal 0 (guest 7 ignored)
    assert stat["cpu0"] == envinfo.CpuTimes(busy=1320, idle=8050)
    assert stat["cpu"].total == 4 * stat["cpu0"].total
    assert set(stat) == {"cpu", "cpu0", "cpu1", "cpu2", "cpu3"}
    assert envinfo.idle_fraction(stat, stat) is None  # no time elapsed


def test_cpu_checks_cgroup_v1_fixture(tmp_path):
    host = read_fixture(tmp_path, "cgroup_v1", affinity=[0, 1, 2, 3])
    assert host.logical_cpus == 4 and host.cgroup_version == 1
    checks = by_name(ec.cpu_checks(config(), host))
    idle = checks["cpu.idle"]  # CPUs 0,1 95% idle, CPUs 2,3 40%: 67.5% over all four
    assert idle.status == "fail" and idle.value == pytest.approx(0.675)
    assert "0.5 s" in idle.message
    load = checks["cpu.load"]
    assert load.status == "warn" and load.value == pytest.approx(0.8)
    usable = checks["cpu.usable"]  # affinity 4, quota 2.5 → 2 usable, and a quota warning
    assert usable.status == "warn" and usable.value == 2 and "2.5" in usable.message
    gov = checks["cpu.governor"]
    assert gov.status == "warn" and "powersave" in gov.value and "never changes" in gov.message
    assert checks["cpu.turbo"].status == "pass" and checks["cpu.turbo"].value == "on"


def test_cpu_checks_follow_the_affinity_set(tmp_path):
    quiet = by_name(ec.cpu_checks(config(), read_fixture(tmp_path, "cgroup_v1", [0, 1], "a")))
    assert quiet["cpu.idle"].status == "pass"
    assert quiet["cpu.idle"].value == pytest.approx(0.95)
    assert quiet["cpu.usable"].status == "pass" and quiet["cpu.usable"].value == 2
    assert quiet["cpu.governor"].status == "warn"  # CPUs 0 and 1 are on powersave
    other = by_name(ec.cpu_checks(config(), read_fixture(tmp_path, "cgroup_v1", [2, 3], "b")))
    assert other["cpu.idle"].value == pytest.approx(0.40)
    assert other["cpu.governor"].status == "pass"


def test_cpu_and_memory_checks_cgroup_v2_fixture(tmp_path):
    host = read_fixture(tmp_path, "cgroup_v2", affinity=[0, 1])
    checks = by_name(ec.cpu_checks(config(), host) + ec.memory_checks(config(), host))
    assert checks["cpu.idle"].status == "fail" and checks["cpu.idle"].value == pytest.approx(0.5)
    assert checks["cpu.load"].status == "pass"
    assert checks["cpu.usable"].status == "pass" and checks["cpu.usable"].value == 2
    assert checks["cpu.governor"].status == "pass"
    assert checks["cpu.turbo"].value == "on" and "cpufreq/boost" in checks["cpu.turbo"].message
    avail = checks["memory.available"]  # 100 GiB free, but only 8 − 2 GiB left in the cgroup
    assert avail.status == "warn" and avail.value == 6 * GiB
    limit = checks["memory.cgroup_limit"]
    assert limit.status == "pass" and limit.value == 8 * GiB and "cgroup v2" in limit.message
    assert checks["memory.swap"].status == "pass" and "no swap" in checks["memory.swap"].message


def test_memory_checks_cgroup_v1_fixture(tmp_path):
    host = read_fixture(tmp_path, "cgroup_v1", affinity=[0, 1, 2, 3])
    checks = by_name(ec.memory_checks(config(), host))
    avail = checks["memory.available"]
    assert avail.status == "warn" and avail.value == 12 * GiB  # 16 GiB limit − 4 GiB in use
    assert "pin_memory=False" in avail.message and avail.threshold == pytest.approx(32e9)
    limit = checks["memory.cgroup_limit"]
    assert limit.value == 16 * GiB and "cgroup v1" in limit.message
    assert "below the machine's RAM" in limit.message
    swap = checks["memory.swap"]
    assert swap.status == "warn" and swap.value == 1 * GiB


def test_memory_checks_plenty_and_fallbacks():
    checks = by_name(ec.memory_checks(config(), HEALTHY_HOST))
    assert checks["memory.available"].status == "pass"
    assert checks["memory.cgroup_limit"].status == "pass"
    assert checks["memory.cgroup_limit"].value is None
    only_swaps = dataclasses.replace(
        HEALTHY_HOST, meminfo={"MemAvailable": 40 * GiB}, swaps_used=GiB
    )
    checks = by_name(ec.memory_checks(config(), only_swaps))
    assert checks["memory.swap"].status == "warn" and checks["memory.swap"].value == GiB
    lower = by_name(ec.memory_checks(config(min_ram_gb=8), dataclasses.replace(only_swaps)))
    assert lower["memory.available"].status == "pass"  # the threshold comes from config


def test_unreadable_host_skips_and_never_sleeps(tmp_path):
    def no_sleep(seconds: float) -> None:
        raise AssertionError("nothing to measure: must not wait")

    host = ec.read_host(tmp_path, 0.5, no_sleep, affinity=[0], env={})
    checks = by_name(ec.cpu_checks(config(), host) + ec.memory_checks(config(), host))
    for name in ("cpu.idle", "cpu.load", "cpu.governor", "cpu.turbo"):
        assert checks[name].status == "skip", name
    for name in ("memory.available", "memory.cgroup_limit", "memory.swap"):
        assert checks[name].status == "skip", name
    assert checks["cpu.usable"].status == "pass"


# ---------------------------------------------------------------- software


@pytest.mark.parametrize(
    ("version", "pin", "ok"),
    [
        ("2.14.1+cu130", "2.14", True),
        ("2.14.1+cu130", "2.14.1", True),
        ("2.14.1+cu130", "2.14.1+cu130", True),
        ("2.14.1", "2.1", False),
        ("2.140.0", "2.14", False),
        ("550.54.15", "550", True),
        ("13.0", "12", False),
    ],
)
def test_version_matches(version, pin, ok):
    assert ec.version_matches(version, pin) is ok


def test_cudnn_version_text():
    assert ec.cudnn_version_text("8902") == "8.9.2"
    assert ec.cudnn_version_text(90100) == "9.1.0"
    assert ec.cudnn_version_text("92400") == "9.24.0"
    assert ec.cudnn_version_text(None) is None


def test_version_pins():
    pins = {"torch": "2.14", "cudnn": "9.24", "driver": "535", "cuda": "13.0"}
    checks = by_name(run(FakeProbe(gpu()), config(expect=pins)).verdict.checks)
    assert (
        checks["software.torch"].status == "pass" and checks["software.torch"].threshold == "2.14"
    )
    assert checks["software.cudnn"].status == "pass" and checks["software.cudnn"].value == "9.24.0"
    assert checks["software.cuda"].status == "pass"
    driver = checks["software.driver"]
    assert driver.status == "fail" and driver.value == "550.54.15" and "535" in driver.message
    assert checks["software.torchvision"].status == "pass"  # not pinned
    # pinned but absent: a CPU-only machine with a driver pin
    absent = by_name(run(NullProbe(), config(expect={"driver": "550"}), sw=SW_CPU).verdict.checks)
    assert absent["software.driver"].status == "fail"


def test_unknown_pin_key_is_a_config_error():
    with pytest.raises(
        ConfigError, match=r"env_check.expect.torhc: unknown key \(did you mean 'torch'\?\)"
    ):
        run(NullProbe(), config(expect={"torhc": "2.14"}))


def test_cpu_only_torch_on_a_gpu_machine_fails():
    check = by_name(run(FakeProbe(gpu()), sw=SW_CPU).verdict.checks)["software.torch_build"]
    assert check.status == "fail" and "install the CUDA build" in check.message
    cpu_run = by_name(run(FakeProbe(gpu()), config(device="cpu"), sw=SW_CPU).verdict.checks)
    assert cpu_run["software.torch_build"].status == "warn"


def test_cuda_build_that_cannot_see_the_gpu_fails():
    sw = SW_CUDA | {"cuda_available": False}
    check = by_name(run(FakeProbe(gpu()), sw=sw).verdict.checks)["software.torch_build"]
    assert check.status == "fail" and "driver" in check.message


def test_cuda_device_requested_without_a_gpu_fails():
    sw = SW_CUDA | {"cuda_available": False}
    check = by_name(run(NullProbe(), config(device="cuda:0"), sw=sw).verdict.checks)
    assert check["software.torch_build"].status == "fail"
    cpu_only = by_name(run(NullProbe(), config(device="cuda"), sw=SW_CPU).verdict.checks)
    assert cpu_only["software.torch_build"].status == "fail"
    with pytest.raises(UsageError, match=r"workload\.device: unknown device 'gpu'"):
        run(NullProbe(), config(device="gpu"))


def test_cudnn_and_tf32_flags():
    cfg = dataclasses.replace(config(), workload=WorkloadConfig(cudnn_benchmark=True))
    checks = by_name(run(FakeProbe(gpu()), cfg).verdict.checks)
    assert checks["software.cudnn_flags"].status == "warn"
    assert "benchmark=True" in checks["software.cudnn_flags"].value
    nondet = dataclasses.replace(config(), workload=WorkloadConfig(deterministic=False))
    assert (
        by_name(run(FakeProbe(gpu()), nondet).verdict.checks)["software.cudnn_flags"].status
        == "warn"
    )
    tf32 = by_name(run(FakeProbe(gpu()), sw=SW_CUDA | {"tf32_matmul": True}).verdict.checks)
    assert tf32["software.tf32"].status == "warn" and tf32["software.tf32"].value.startswith(
        "matmul=on"
    )
    on_cpu = by_name(run(NullProbe(), cfg, sw=SW_CPU).verdict.checks)
    assert (
        on_cpu["software.cudnn_flags"].status == "pass" and on_cpu["software.tf32"].status == "pass"
    )


def test_thread_counts_against_usable_cpus():
    two = dataclasses.replace(HEALTHY_HOST, affinity=[0, 1])
    over = by_name(run(NullProbe(), host=two, sw=SW_CPU).verdict.checks)["software.threads"]
    assert over.status == "warn" and (over.value, over.threshold) == (8, 2)
    assert "workload.threads: 2" in over.message
    cfg = dataclasses.replace(config(), workload=WorkloadConfig(threads=2))
    fixed = by_name(run(NullProbe(), cfg, host=two, sw=SW_CPU).verdict.checks)
    assert fixed["software.threads"].status == "pass"
    omp = dataclasses.replace(HEALTHY_HOST, env={"OMP_NUM_THREADS": "16"})
    omp_check = by_name(run(NullProbe(), host=omp, sw=SW_CPU).verdict.checks)["software.threads"]
    assert omp_check.status == "warn" and "OMP_NUM_THREADS=16" in omp_check.message


# ---------------------------------------------------------------- the result


def test_result_file_contents():
    result = run(FakeProbe(gpu(temperature_c=70.0)))
    assert result.kind == "env-check" and result.verdict.failed
    doc = json.loads(result.to_json())
    assert doc["config"]["env_check"]["gpu_max_temp_c"] == 65.0
    assert set(doc["environment"]) == {"blocking", "informational"}
    names = [c["name"] for c in doc["verdict"]["checks"]]
    for prefix in ("gpu.", "gpu0.", "cpu.", "memory.", "software."):
        assert any(n.startswith(prefix) for n in names), prefix
    for c in doc["verdict"]["checks"]:
        assert c["status"] in ("pass", "warn", "fail", "skip") and c["message"]
        assert set(c) >= {"name", "status", "value", "threshold", "message", "ok"}
    assert doc["data"]["gpus"][0]["temperature_c"] == 70.0
    assert doc["data"]["host"]["window_s"] == 0.5


def test_run_env_check_reads_the_host_when_not_given(tmp_path):
    root = fixture_root(tmp_path, "cgroup_v2")

    def fake_sleep(seconds: float) -> None:
        shutil.copy(root / "proc/stat.later", root / "proc/stat")

    result = ec.run_env_check(config(), NullProbe(), software=SW_CPU, root=root, sleep=fake_sleep)
    checks = by_name(result.verdict.checks)
    assert checks["memory.cgroup_limit"].value == 8 * GiB
    assert checks["cpu.turbo"].value == "on"


def test_display_formats_units():
    checks = by_name(run(FakeProbe(gpu())).verdict.checks)
    assert ec.display(checks["gpu0.temperature"]) == ("38 °C", "≤ 65 °C")
    assert ec.display(checks["gpu0.memory_total"]) == ("80.0 GB", "≥ 12.0 GB")
    assert ec.display(checks["cpu.idle"]) == ("99%", "≥ 90%")
    assert ec.display(checks["gpu0.throttle"])[0] == "gpu_idle"
    assert ec.display(checks["memory.cgroup_limit"]) == ("—", "—")
