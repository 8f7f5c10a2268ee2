"""A short soak with real processes: every window sampled, every request accounted for, outputs written.

The verdicts (RSS growth after warm-up, p99 per window) are computed and reported by the soak;
judged here only where no timing is involved: nothing lost, no error, the figures present.
"""

from __future__ import annotations

import json
import math

import pytest

from triton_fastpath.reliability.soak import SoakResult, format_report, run_soak, verdicts, write_outputs

pytestmark = pytest.mark.integration


def test_a_short_soak_samples_every_process_and_loses_nothing(built_repository, tmp_path) -> None:
    result = run_soak(built_repository, tmp_path / "work", duration_s=20, window_s=5, progress=lambda _: None)
    assert result.capacity_rps > 0 and result.offered_rps == pytest.approx(0.7 * result.capacity_rps)
    # Every request is answered, or shed by admission control (Overloaded, answered at once) and
    # nothing else. The test machine is shared and stalls now and then: a stopped tritonserver
    # (SIGSTOP, 200 ms) mid-soak queues ~400 requests and admission control sheds ~200 of them, by
    # design, then the next window is clean; CI saw 418 shed (1.7%) behind a 169 ms first-window p99.
    # So this 20 s run judges what a stall cannot explain: any other failure, anything lost, or
    # shedding beyond 5% of the run. The published 30-minute run's verdict counts every failure.
    assert result.sent > 0 and result.lost == 0, result.failures
    assert set(result.failures) <= {"Overloaded"}, result.first_error
    assert result.failed <= 0.05 * result.sent, (result.failures, [(s.t_s, s.errors, s.p99_ms) for s in result.samples])
    assert len(result.samples) >= 3
    for sample in result.samples:
        assert sample.rss_mb["tritonserver"] > 0 and sample.fds["tritonserver"] > 0
        stubs = [name for name in sample.rss_mb if name != "tritonserver"]
        # every Python stub; digits runs inside tritonserver (the native backend), with no stub
        assert {"sentiment_fused_0_0", "sentiment_fused_0_1", "embed_fused_0_0"} <= set(stubs), stubs
        assert not any(name.startswith("digits") for name in stubs), stubs
        assert not math.isnan(sample.redis_mb) and sample.redis_mb > 0
    # the L2 is written: the served response cache (two-tier, or the Python lookup's) has Redis
    assert result.samples[-1].redis_keys > 0, [(s.t_s, s.redis_keys) for s in result.samples]
    assert set(result.checks) == set(verdicts(result))
    files = write_outputs(result, tmp_path / "out")
    assert [f.name for f in files] == ["soak.json", "soak.md", "soak.png"] and all(f.stat().st_size for f in files)
    assert json.loads(files[0].read_text())["lost"] == 0
    assert "| t (s) | RSS total MiB |" in files[1].read_text()


def test_verdicts_need_two_windows_and_judge_growth_after_the_warm_up() -> None:
    from triton_fastpath.reliability.soak import Sample

    def sample(t: float, rss: float, p99: float) -> Sample:
        return Sample(t, {"tritonserver": rss}, {"tritonserver": 10}, 1.0, 100, 0, 1.0, p99)

    result = SoakResult(100, 70, 60, 10, warmup_s=20, samples=[sample(10, 50, 10)])
    assert verdicts(result) == {"at least two windows with traffic": False}
    result.samples = [sample(10, 50, 10), sample(20, 100, 12), sample(30, 104, 14), sample(40, 104, 16)]
    checks = verdicts(result)  # 50 -> 100 MiB is the warm-up; 100 -> 104 is +4%
    assert checks["RSS growth after the 20 s warm-up +4.0% <= 5%"]
    assert not checks["worst window p99 16.0 ms <= 1.5 x first 10.0 ms"]
    result.checks = checks
    result.sent, result.answered, result.failed, result.failures = 10, 7, 3, {"Overloaded": 2, "Timeout": 1}
    report = format_report(result)
    assert "- FAIL: worst window p99 16.0 ms" in report and "- PASS: RSS growth" in report
    assert "10 sent, 7 answered, 3 failed (Overloaded 2, Timeout 1), 0 lost." in report
