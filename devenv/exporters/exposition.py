"""Series as data, and the two text formats they are written in.

Renderers build `Family`/`Sample` values with label order and value strings exactly as each
real exporter prints them; this module only serialises. The same samples feed the Prometheus
text format (what is scraped) and OpenMetrics with timestamps (what `promtool` backfills), so
the two paths cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    """One line: name, labels in exposition order, the value as the exporter formats it."""

    name: str
    labels: Labels
    value: str
    timestamp_ms: int | None = None

    def label(self, name: str) -> str | None:
        return next((v for k, v in self.labels if k == name), None)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str
    type: str  # gauge | counter | untyped
    samples: tuple[Sample, ...]


def go_float(value: float) -> str:
    """Format like Go's `strconv.FormatFloat(v, 'g', -1, 64)`, which client_golang-based exporters
    (kube-state-metrics, node-exporter, the kubelet) use: shortest round-trip digits, exponent form
    when the decimal exponent is < -4 or >= 6 (so `1.7542e+09`, `3.831959552e+09`, `10870.69`).

    Python's `repr` has the same shortest digits, so plain decimals in that range are reshaped
    from it directly (a big sandbox formats ~10^5 counter values per scrape); the rest goes the
    general way through `Decimal`.
    """
    v = float(value)
    r = repr(v)
    if "e" not in r and "n" not in r and v != 0:  # not inf/nan, not already in exponent form
        sign, body = ("-", r[1:]) if r[0] == "-" else ("", r)
        whole, frac = body.split(".")
        frac = "" if frac == "0" else frac
        if whole != "0":
            if len(whole) <= 6:  # decimal exponent len-1 < 6
                return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"
        elif len(frac) - len(frac.lstrip("0")) <= 3:  # exponent -(zeros+1) >= -4
            return f"{sign}0.{frac}"
    return _go_float_general(v)


def _go_float_general(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0" if math.copysign(1, v) < 0 else "0"
    sign, digits, exp = Decimal(repr(v)).normalize().as_tuple()
    ds = "".join(map(str, digits))
    dp = len(ds) + int(exp)  # decimal point position relative to the digit string
    e = dp - 1
    neg = "-" if sign else ""
    if e < -4 or e >= 6:
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if dp <= 0:
        return f"{neg}0.{'0' * -dp}{ds}"
    if dp >= len(ds):
        return f"{neg}{ds}{'0' * (dp - len(ds))}"
    return f"{neg}{ds[:dp]}.{ds[dp:]}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_text(labels: Labels) -> str:
    """`{k="v",...}` as exporters print it (empty string for no labels)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def sample_line(sample: Sample, *, seconds: bool = False) -> str:
    """`name{labels} value [timestamp]`; ms timestamps for the text format, seconds for OpenMetrics."""
    line = f"{sample.name}{labels_text(sample.labels)} {sample.value}"
    if sample.timestamp_ms is not None:
        ts = f"{sample.timestamp_ms / 1000:.3f}" if seconds else str(sample.timestamp_ms)
        line += f" {ts}"
    return line


def to_text(families: Iterable[Family]) -> str:
    """Prometheus text format 0.0.4, with HELP/TYPE for every family that has samples."""
    out: list[str] = []
    for fam in families:
        if not fam.samples:
            continue
        out.append(f"# HELP {fam.name} {fam.help}")
        out.append(f"# TYPE {fam.name} {fam.type}")
        out.extend(sample_line(s) for s in fam.samples)
    return "\n".join(out) + "\n" if out else ""


def openmetrics_lines(samples: Iterable[Sample]) -> Iterable[str]:
    """Sample lines with second timestamps, without metadata (promtool needs only samples).

    Metadata is left out on purpose: OpenMetrics wants counters declared without `_total`, and
    untyped samples are stored identically, so skipping it avoids a class of parse errors.
    """
    for s in samples:
        yield sample_line(s, seconds=True)
