"""How bench/calibrate-host.sh turns measured time ratios into selection limits.

One rule serves both limits it writes: a prefix of the measured sizes takes the first
algorithm, the rest the second, and the prefix chosen is the one whose summed log time
ratio (first / second) is least, the shortest on a tie. A sum over all sizes, not "the
first size where the second wins", so one noisy point does not move the limit far.
"""
import math
import os


def cheapest_prefix(ratios):
    """Length of the prefix of `ratios` (time of the first algorithm / time of the second,
    by ascending size) with the least summed log: the sizes the first algorithm takes."""
    best, best_len, acc = 0.0, 0, 0.0
    for i, r in enumerate(ratios):
        acc += math.log(r)
        if acc < best - 1e-12:
            best, best_len = acc, i + 1
    return best_len


def staged_limit(ratio):
    """{size: staged time / direct time} -> the largest size that runs staged (0: none)."""
    sizes = sorted(ratio)
    k = cheapest_prefix([ratio[s] for s in sizes])
    return sizes[k - 1] if k else 0


def bounce_from(ratio):
    """{size: bounce time / single-copy time} -> the smallest size that bounces: single
    copies take the cheapest prefix; past the largest size when they take every one."""
    sizes = sorted(ratio)
    k = cheapest_prefix([1.0 / ratio[s] for s in sizes])
    return sizes[k] if k < len(sizes) else 2 * sizes[-1]


MACHINE_ID_TAG = "# machine-id: "


def cached_table_path(env=None):
    """Where calibrate-host.sh caches this host's table and the library looks for it
    (UNILINK_TUNING_FILE=auto; tuning.c, cached_table_path): $XDG_CACHE_HOME, else
    $HOME/.cache, then unilink/host-tuning-<host name>.txt; None without either."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or (env.get("HOME") and os.path.join(env["HOME"], ".cache"))
    if not base:
        return None
    return os.path.join(base, "unilink", f"host-tuning-{os.uname().nodename}.txt")


def machine_id(cpuinfo="/proc/cpuinfo"):
    """The line a cached table starts with, as the library builds it (tuning.c,
    machine_id): the first "model name" of cpuinfo (empty where it has none), " | ", the
    CPUs online. The library reads a cached table only where this line is its own."""
    model = ""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("model name") and ":" in line:
                    model = line.split(":", 1)[1].strip(" \t\n")
                    break
    except OSError:
        pass
    return f"{MACHINE_ID_TAG}{model} | {os.sysconf('SC_NPROCESSORS_ONLN')}"
