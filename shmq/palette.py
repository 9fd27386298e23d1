"""The colours and units that every picture of shmq uses: ``shmq-bench --plot`` (matplotlib)
and the dashboard (served to the browser as /palette.json), so a series looks and reads the
same in a benchmark report and on the dashboard. Imports nothing (any layer may import it).
"""
from __future__ import annotations

#: Series colours, in order of use: a colour-blind-safe qualitative set (Okabe and Ito).
SERIES = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
#: shmq itself is always the first colour, whatever else is drawn beside it.
SHMQ = SERIES[0]
BACKGROUND = "#FFFFFF"
GRID = "#DDDDDD"
TEXT = "#222222"

#: Units of the quantities both show, with their axis labels.
UNITS = {
    "rate": "msg/s",
    "latency": "µs",
    "bytes": "B",
    "lag": "messages",
}


def color(i: int) -> str:
    return SERIES[i % len(SERIES)]


def si(value: float, unit: str = "") -> str:
    """1234567 -> "1.23 M" (the same rounding the dashboard's JavaScript does)."""
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= div:
            return f"{value / div:.3g} {prefix}{unit}".rstrip()
    return f"{value:.3g} {unit}".rstrip()


def as_json() -> dict:
    return {"series": list(SERIES), "shmq": SHMQ, "background": BACKGROUND, "grid": GRID, "text": TEXT,
            "units": UNITS}
