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
    assert result.sent > 0 and result.lost == 0 and result.failed == 0
    assert len(result.samples) >= 3
    for sample in result.samples:
        assert sample.rss_mb["tritonserver"] > 0 and sample.fds["tritonserver"] > 0
        stubs = [name for name in sample.rss_mb if name != "tritonserver"]
        # every Python stub; digits runs inside tritonserver (the native backend), with no stub
        assert {"sentiment_fused_0_0", "sentiment_fused_0_1", "embed_fused_0_0"} <= set(stubs), stubs
        assert not any(name.startswith("digits") for name in stubs), stubs
        assert not math.isnan(sample.redis_mb) and sample.redis_mb > 0
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
    report = format_report(result)
    assert "- FAIL: worst window p99 16.0 ms" in report and "- PASS: RSS growth" in report
