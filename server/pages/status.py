"""A campaign's status for the campaigns list and a campaign's header: counts, aggregator lag,
ingest rate (no decoding).

The ingest rate is accepted reports per second over about the last minute, from the collector's
accepted-reports counter (``tally.summary``: summed over shards, written by the ingest script).
``IngestRates`` (``ldptel.server.probe``) keeps, in this process's memory, the readings of that
counter that the process's probe thread takes every second anyway (and those every status read
makes): a page view writes nothing to Redis. The counter counts the reports of every worker, so
the readings of any one process give the collector's rate; since the probe reads from the
process's start, any worker answers with a real rate ("measuring…" only in a worker's first
``RATE_GAP_S``; issue 35: a worker not asked before said "measuring…" 47 s after the last
report). No reading is taken of a campaign in a shuffled privacy mode (no per-second rate).

While batches wait and the campaign's last commit is ``QUIET_AFTER_S`` old (or there has been
none), the lag says "no aggregator has committed for N s" (or "… yet"). Batches the shuffler
holds (in the ingress stream, normally until ``shuffle_min_reports`` or ``shuffle_max_delay``)
are its normal state, shown apart and in a neutral colour (``lag_class`` "holding"), unless the
campaign's last commit is older than ``shuffle_max_delay`` plus ``HELD_SLACK_S``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ldptel.campaigns.config import Campaign
from ldptel.mechanisms.builder import DEVICE_LEVEL_KINDS
from ldptel.privacy.modes import Shuffled, ShuffledFakes, is_shuffled
from ldptel.server import charts
from ldptel.server.pages.labels import KIND_LABELS, ago, domain_label, mechanism_label, utc, window_label
from ldptel.server.probe import IngestRates
from ldptel.store import tally
from ldptel.store.redis_client import AnyRedis

QUIET_AFTER_S = 10.0  # batches waiting and no commit for this long: say so
HELD_SLACK_S = 30.0  # held by the shuffler past shuffle_max_delay + this, with no commit: a warning


@dataclass
class Status:
    """What the campaigns list and a campaign's header show; no decoding."""

    campaign: Campaign
    windows: dict[int, int]  # window → reports counted
    counted: int
    current_window: int
    current_reports: int
    accepted: int  # reports the collector stored
    lag_entries: int  # stream entries (batches) accepted but not yet counted
    lag_reports: int | None
    rate: float | None
    updated: float | None
    quiet: str | None = None  # "no aggregator has committed …" (``aggregator_quiet``)
    window_updated: dict[int, float] = field(default_factory=dict)  # window → epoch s of its last commit
    held_batches: int = 0  # of ``lag_entries``: batches the shuffler holds (ingress)
    held_reports: int = 0
    held_late: bool = False  # held past shuffle_max_delay + HELD_SLACK_S with no commit

    @property
    def released(self) -> bool:
        return self.current_reports >= self.campaign.min_reports


def campaign_status(r: AnyRedis, campaign: Campaign, rates: IngestRates, now: float | None = None,
                    older: Sequence[Campaign] = (), shuffled: bool = False) -> Status:
    """The campaign's ``tally.summary`` at ``now`` (default: the clock), with its ingest rate
    (``older``: the campaign's earlier versions, whose batches share its streams; ``shuffled``:
    ``[shuffler] enabled``, so batches not yet taken from ingress are held by the shuffler)."""
    now = time.time() if now is None else now
    summ = tally.summary(r, campaign, older)
    rate = None if is_shuffled(campaign) else rates.rate(campaign.name, summ.accepted_reports, now)
    cur = tally.current_window(campaign, now)
    held = min(summ.held_batches, summ.lag_entries) if shuffled else 0
    late = campaign.shuffle_max_delay_seconds + HELD_SLACK_S
    return Status(campaign=campaign, windows=summ.windows, counted=sum(summ.windows.values()),
                  current_window=cur, current_reports=summ.windows.get(cur, 0),
                  accepted=summ.accepted_reports, lag_entries=summ.lag_entries, lag_reports=summ.lag_reports,
                  rate=rate, updated=summ.updated,
                  quiet=aggregator_quiet(summ.lag_entries - held, summ.updated, now),
                  window_updated=summ.window_updated, held_batches=held,
                  held_reports=summ.held_reports if held else 0,
                  # a shuffled campaign's batches wait for batch_min devices: never late
                  held_late=(bool(held) and summ.updated is not None and now - summ.updated > late
                             and not is_shuffled(campaign)))


def aggregator_quiet(lag_entries: int, updated: float | None, now: float) -> str | None:
    """"no aggregator has committed for N s" while batches wait and the last commit (epoch
    ``updated``) is at least ``QUIET_AFTER_S`` old, "… yet" if there was none; else None."""
    if lag_entries == 0:
        return None
    if updated is None:
        return "no aggregator has committed yet"
    quiet = now - updated
    return f"no aggregator has committed for {quiet:.0f} s" if quiet >= QUIET_AFTER_S else None


def status_view(st: Status) -> dict[str, Any]:
    """Display strings of a ``Status``."""
    c = st.campaign
    queued = st.lag_entries - st.held_batches  # bound for (or in) the aggregator
    parts = []
    if queued:
        parts.append(f"{queued:,} batch{'es' if queued != 1 else ''} waiting"
                     + (f" ({charts.fmt_count(st.lag_reports)} reports)" if st.lag_reports and not
                        st.held_batches else ""))
    if st.held_batches:
        parts.append(f"{charts.fmt_count(st.held_reports)} reports held by the shuffler")
    if st.quiet:
        parts.append(st.quiet)
    lag = "; ".join(parts) or "up to date"
    lag_note = (f"released at {charts.fmt_count(c.shuffle_min_reports)} reports or after "
                f"{c.shuffle_max_delay}" if st.held_batches else "accepted batches not yet counted")
    # amber only when something is late: batches waiting with no commit for QUIET_AFTER_S (or
    # none yet), or the shuffler holding past its delay; batches waiting while the aggregator
    # commits every few seconds are the normal flow (issue 35: they were amber all along)
    late = st.held_late or (queued > 0 and st.quiet is not None)
    lag_class = "ok" if st.lag_entries == 0 else "lagging" if late else "holding"
    # no local ε (shuffled-fakes without local_epsilon): the true value, sealed to the aggregator;
    # "none" read as "no privacy cost" (issue 35)
    eps = charts.fmt_eps(c.epsilon) if c.epsilon is not None else "∞ (the true value, sealed)"
    mechanism = mechanism_label(c)
    if isinstance(c.mode, (Shuffled, ShuffledFakes)):  # counts move by whole batches: no per-second rate
        st = replace(st, rate=0.0, updated=None, window_updated={})  # (nor a commit time)
        mechanism = f"{mechanism} · {c.mode.name}"
        if st.held_batches:
            lag_note = f"released in whole batches of ≥ {charts.fmt_count(c.mode.batch_min)} devices"
    return {
        "name": c.name, "kind": KIND_LABELS.get(c.kind, c.kind), "mechanism": mechanism,
        "domain": domain_label(c), "description": c.description,
        "epsilon": eps,
        "epsilon_inf": charts.fmt_eps(c.params.get("epsilon_inf")) if c.oracle == "rappor" else None,
        "counted": charts.fmt_count(st.counted), "accepted": charts.fmt_count(st.accepted),
        "current_window": window_label(c, st.current_window),
        "current_reports": charts.fmt_count(st.current_reports), "current_n": st.current_reports,
        "rate": "whole batches" if is_shuffled(c) else "measuring…" if st.rate is None else
        "0 reports/s" if st.rate == 0 else f"{charts.fmt_rate(st.rate)} reports/s",
        "lag": lag, "lag_note": lag_note, "lag_ok": lag_class != "lagging", "lag_class": lag_class,
        # a shuffled campaign's counts move by whole releases, which carry no commit time: "never"
        # beside 20,000 released reports read as broken (issue 35)
        "updated": ago(st.updated) if not is_shuffled(c) or not st.counted
        else "with each whole batch",
        "updated_utc": utc(st.updated),
        "rate_note": "accepted by the collector, last minute" if not is_shuffled(c)
        else "counted in whole shuffled batches: no per-second rate",
        "any_reports": st.counted > 0,
        "device_level": c.kind in DEVICE_LEVEL_KINDS,
        "min_reports": charts.fmt_count(c.min_reports), "released": st.released,
        "progress": min(1.0, st.current_reports / max(c.min_reports, 1)),
    }
