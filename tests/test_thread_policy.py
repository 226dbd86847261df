"""The thread policy (joy_agents.threads): torch's thread count follows the cores other processes leave free."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from joy_agents import threads
from joy_agents.threads import ThreadGovernor, busy_cores

linux_proc = pytest.mark.skipif(threads._cpu_times(None) is None, reason="needs Linux's /proc/stat")


def test_busy_cores_are_the_machines_busy_time_less_this_processs_own():
    # two cores for 200 ticks (400 in all): 300 busy ticks of which 100 were this process's -> one core taken
    assert busy_cores((1000, 5000, 50), (1300, 5400, 150), cores=2) == pytest.approx(1.0)
    assert busy_cores((1000, 5000, 50), (1100, 5400, 150), cores=2) == 0.0  # all of it ours
    assert busy_cores((1000, 5000, 50), (1000, 5000, 50), cores=2) == 0.0  # no time passed


class _Readings:
    """Readings (busy, total, own) handed out in turn, in place of /proc."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def __call__(self):
        return self.readings.pop(0)


@pytest.fixture
def four_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    yield
    torch.set_num_threads(before)


def test_the_governor_takes_a_thread_per_core_another_process_holds_and_gives_it_back(monkeypatch, four_threads):
    # four cores, 100 ticks each per reading
    readings = _Readings(
        (0, 0, 0),  # at start
        (200, 400, 100),  # others kept one core busy
        (600, 800, 100),  # others kept all four busy: one thread is the least
        (700, 1200, 200),  # nobody else
    )
    monkeypatch.setattr(ThreadGovernor, "_reading", lambda self: readings())
    governor = ThreadGovernor(interval_s=0.0)
    governor._cores = 4
    assert governor.cap == 4
    assert governor.update() == 3 and torch.get_num_threads() == 3
    assert governor.update() == 1 and torch.get_num_threads() == 1
    assert governor.update() == 4 and torch.get_num_threads() == 4


def test_the_governor_reads_the_machine_at_most_once_per_interval(monkeypatch, four_threads):
    readings = _Readings((0, 0, 0), (400, 400, 0))
    monkeypatch.setattr(ThreadGovernor, "_reading", lambda self: readings())
    governor = ThreadGovernor(interval_s=3600.0)
    assert governor.update() == 4 and len(readings.readings) == 1  # not read again within the hour


def test_a_count_the_user_sets_becomes_the_cap(monkeypatch, four_threads):
    readings = _Readings((0, 0, 0), (0, 400, 0))
    monkeypatch.setattr(ThreadGovernor, "_reading", lambda self: readings())
    governor = ThreadGovernor(interval_s=0.0)
    governor._cores = 4
    torch.set_num_threads(2)
    assert governor.update() == 2 and governor.cap == 2  # four cores free, but the user asked for two


def test_the_off_switch_leaves_the_count_alone(monkeypatch):
    monkeypatch.setenv(threads.OFF_SWITCH, "off")
    assert threads.follow_free_cores() is None


@linux_proc
def test_a_busy_process_beside_this_one_is_seen():
    governor = ThreadGovernor(cap=1, interval_s=0.0)
    start = governor._reading()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.5)
        end = governor._reading()
    finally:
        spinner.kill()
        spinner.wait()
    assert busy_cores(start, end, governor._cores) >= 0.6  # about one core (more if the machine is busier)


def test_samplers_follow_the_free_cores_before_each_step(distinct_team, monkeypatch):
    from joy_agents.policy import SamplingConfig
    from joy_agents.sampling import continuous, generate
    from joy_agents.sampling.base import drain

    calls = []
    for module in (continuous, generate):
        monkeypatch.setattr(module, "follow_free_cores", lambda: calls.append(1))
    prompt = distinct_team.encode_prompt("qa", [{"role": "user", "content": "hi"}], None)
    for sampler in (
        continuous.ContinuousSampler(distinct_team, SamplingConfig(max_new_tokens=3)),
        generate.GenerateSampler(distinct_team, SamplingConfig(max_new_tokens=3)),
    ):
        calls.clear()
        sampler.submit("qa", prompt, 0)
        steps = 0
        while sampler.busy:
            sampler.step()
            steps += 1
        assert len(calls) == steps > 0
        drain(sampler)
