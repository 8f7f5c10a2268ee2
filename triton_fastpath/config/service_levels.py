"""The service levels: what each model promises (its p99), and the queue timeouts and admission
budgets cut from it (`ServiceLevels`, the group `RepoSettings.service_levels`; the profiles
`default`, `relaxed` and `none`). What they become, model by model, is
`triton_fastpath.models.parts` (`queue_timeouts_us`, `admission_parameters`).
"""

from __future__ import annotations

from dataclasses import dataclass

from triton_fastpath.errors import ConfigError

# The p99 (ms) each bundled pipeline promises: the profiles of `loadtests/sla.toml` (default) and
# `loadtests/sla-relaxed.toml` (a test keeps them in step). Each model's queue timeouts are cut from
# it (`models.parts.queue_timeouts_us`). A shared CI machine (server, load generator and other jobs
# on 2 cores) cannot hold the default: there, as for the load-test gates, choose the relaxed
# profile, by `--service-levels relaxed` (the commands that build or start servers take it).
SERVICE_LEVELS_MS: tuple[tuple[str, float], ...] = (("sentiment", 50.0), ("digits", 20.0))
SERVICE_LEVEL_PROFILES: dict[str, tuple[tuple[str, float], ...]] = {
    "default": SERVICE_LEVELS_MS,
    "relaxed": (("sentiment", 500.0), ("digits", 250.0)),
    # No service level: no admission budget, nothing is ever shed (overload queues without bound).
    "none": (),
}
# Share of that p99 a request may wait behind in one batch, per priority (the admission budgets of
# the Python models, `models.parts.admission_parameters`): the lowest (default) level is shed beyond half of it,
# so what it gets answered still arrives within the service level; priority 1 gets more (it is the
# traffic to keep), and is computed first anyway.
QUEUE_SHARE_LOWEST, QUEUE_SHARE_HIGHER = 0.5, 0.8
# A model with no service level (embed, imported models) keeps this queue timeout.
FALLBACK_QUEUE_TIMEOUT_US = 5_000_000


def service_levels(profile: str = "default") -> tuple[tuple[str, float], ...]:
    """The `(model, p99 ms)` pairs of the named profile (`SERVICE_LEVEL_PROFILES`).

    Raises:
        ConfigError: an unknown profile, naming the choices.
    """
    if profile not in SERVICE_LEVEL_PROFILES:
        raise ConfigError(f"service levels {profile!r}: expected one of {sorted(SERVICE_LEVEL_PROFILES)}")
    return SERVICE_LEVEL_PROFILES[profile]


@dataclass(frozen=True)
class ServiceLevels:
    """What each model promises, and how long its requests may wait for it.

    Attributes:
        p99_ms: the p99 each model promises, `(model, ms)` pairs; default: the default profile
            (`SERVICE_LEVEL_PROFILES`; `ServiceLevels.profile(name)` gives another). Each model's queue
            timeouts and admission budgets are cut from it (`models.parts.queue_timeouts_us`).
        priority_levels: request priorities accepted (1 = highest); the default is the lowest.
        queue_timeout_us: a request still queued after this long is rejected before it is computed
            (0 = no limit). None (default): cut from the model's service level per priority; an
            explicit value applies to every model and priority.
    """

    p99_ms: tuple[tuple[str, float], ...] = SERVICE_LEVELS_MS
    priority_levels: int = 2
    queue_timeout_us: int | None = None

    @classmethod
    def profile(cls, name: str = "default") -> ServiceLevels:
        """The named profile (`SERVICE_LEVEL_PROFILES`: default, relaxed, none).

        Raises:
            ConfigError: an unknown profile, naming the choices.
        """
        return cls(p99_ms=service_levels(name))

    def p99_of(self, model: str | None) -> float | None:
        """The p99 (ms) `model` promises, or None without one."""
        return dict(self.p99_ms).get(model or "")

    def __post_init__(self) -> None:
        object.__setattr__(self, "p99_ms", tuple((str(m), float(ms)) for m, ms in self.p99_ms))
        late = [model for model, ms in self.p99_ms if ms <= 0]
        if late:
            raise ConfigError(f"service_levels.p99_ms: {late} promise a p99 <= 0 ms; expected > 0")
        if self.priority_levels < 0:
            raise ConfigError(f"service_levels.priority_levels={self.priority_levels}; expected >= 0 (0: none)")
        if self.queue_timeout_us is not None and self.queue_timeout_us < 0:
            raise ConfigError(f"service_levels.queue_timeout_us={self.queue_timeout_us}; expected >= 0 or None")
