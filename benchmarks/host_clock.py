"""What a wall-clock figure on a shared machine is worth: this process's CPU time and the host's steal.

On a virtual machine the hypervisor can hand the CPUs to other guests ("steal"); a run then takes
longer by wall clock with no change in the work done. Every timing benchmark records, beside its
wall seconds, the process's own CPU seconds (user + system, all threads) and the share of the
machine's CPU time stolen while it ran, so two timings can be compared knowing how busy the host was.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Clock:
    """A reading: wall seconds, process CPU seconds, host steal seconds (None where /proc/stat is absent)."""

    wall: float
    cpu: float
    steal: float | None

    @classmethod
    def now(cls) -> Clock:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(time.perf_counter(), usage.ru_utime + usage.ru_stime, _host_steal_seconds())

    def since(self, start: Clock) -> dict[str, float | None]:
        """``process_cpu_seconds`` and ``host_steal_share`` = stolen / (wall × CPUs) between two readings."""
        wall = self.wall - start.wall
        share = None
        if self.steal is not None and start.steal is not None and wall > 0:
            share = round((self.steal - start.steal) / (wall * (os.cpu_count() or 1)), 4)
        return {"process_cpu_seconds": round(self.cpu - start.cpu, 2), "host_steal_share": share}


def _host_steal_seconds() -> float | None:
    """Seconds of steal summed over all CPUs since boot (the 8th field of /proc/stat's ``cpu`` line)."""
    try:
        fields = _PROC_STAT.read_text(encoding="ascii").split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None
