"""Memory settings for a long-running daemon: glibc's malloc for multi-megabyte
messages, and the garbage collector's view of what start-up built.

**malloc.**

An ``fs/writeFile`` of 8 MiB arrives as an 11 MB frame and becomes several
buffers of that size (the frame, the base64 text, the decoded data). glibc
serves each from fresh ``mmap`` pages (its threshold adapts only up to the
size last freed, and it trims the heap back once more than twice that is
free at its top), so every such request page-faulted in ~21 MB anew: 5 400
minor faults per write on the benchmark VM. Keeping blocks up to 32 MiB on the
heap and up to 64 MiB of free heap untrimmed: no faults after the first
write, the server's CPU per write ~40 -> ~25 ms, for ~22 MB more resident
memory after the first large message (102 against 80 MB after twenty 8 MiB
writes).
Process output and small requests never reach these sizes: idle memory is
unchanged.

Set with ``mallopt`` in the daemon's own process only: ``MALLOC_*``
environment variables would reach every command it starts.

**The collector.** A full (generation 2) collection walks every container
object, and most of them are what start-up built: modules, classes, functions,
the method table. One took 18 to 25 ms in the running daemon on the benchmark VM,
a pause for every connection. Frozen after start-up (``gc.freeze``), those
objects are left out and the same collection took 0.10 to 0.14 ms. They stay
alive for the daemon's life, as they would anyway.

Before freezing, only the young generations are collected: start-up's garbage
(~130 objects, import-time cycles) is all there, and a full collection after
that found nothing more in every start measured (plain, with the start-up
probe, with --state-dir), while it made this step 23-25 ms of the daemon's
start instead of 4-5 ms (a loaded 2-vCPU machine; the start is ~250 ms of
CPU). Should an older cycle ever be unreachable by then, it is kept with the
rest: a one-time, bounded cost.

**How often it collects.** Under load an operation's objects (its task, futures,
frames, buffers) live while it waits, outlive the young collections and reach the
oldest generation, and CPython then runs a full collection each time that
generation has grown by a quarter. At 1,000 agents on the benchmark VM
(docs/scale.md) that was a full collection every ~7 s, up to 336 ms each, freeing
nothing: they were what was still in flight. With the thresholds raised (young
collections every 10,000 net allocations instead of 700, a full one at most every
100 middle ones instead of 10), the same run had none, and throughput went from 98
to 128 operations/s (CPU per 1,000 operations 11.2 to 8.7 s). Reference cycles are
still collected by the young and middle collections (the longest, a middle one, was
61-77 ms there); memory held by cycles that reach the oldest generation waits longer.
"""

from __future__ import annotations

import ctypes
import gc

__all__ = [
    "COLLECTOR_THRESHOLDS",
    "MMAP_THRESHOLD",
    "TRIM_THRESHOLD",
    "freeze_startup_objects",
    "tune_collector",
    "tune_malloc",
]

# From glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# gc.set_threshold: (net allocations between young collections, young collections
# between middle ones, middle collections between full ones); CPython's are
# (700, 10, 10). See "How often it collects" above.
COLLECTOR_THRESHOLDS = (10_000, 10, 100)

MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 64 << 20


def tune_malloc() -> bool:
    """Apply the settings; False where the C library has no ``mallopt`` (musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def freeze_startup_objects() -> int:
    """Collect the young generations once (see above), then move every object that
    survived into the collector's permanent generation; returns how many objects
    that is."""
    gc.collect(1)
    gc.freeze()
    return gc.get_freeze_count()


def tune_collector() -> None:
    """Collect less often (COLLECTOR_THRESHOLDS; see above)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
