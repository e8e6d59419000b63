#!/usr/bin/env python3
"""bench/tuning_rules.py: the limits calibrate-host.sh writes, on hand-made ratios."""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tuning_rules as t  # noqa: E402

K = 1024
M = K * K
failures = []


def check(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got}, want {want}")
        print("FAIL:", failures[-1])


# staged wins up to 8K, loses above
check(t.staged_limit({1 * K: 0.5, 2 * K: 0.6, 4 * K: 0.8, 8 * K: 0.9, 16 * K: 1.5}), 8 * K,
      "staged up to 8K")
# one noisy point (16K at 0.95) after a clear loss does not move the limit past it
check(t.staged_limit({1 * K: 0.5, 2 * K: 0.6, 4 * K: 2.0, 8 * K: 1.2, 16 * K: 0.95}), 2 * K,
      "noise after the crossover")
check(t.staged_limit({1 * K: 1.2, 2 * K: 1.5}), 0, "direct everywhere")
check(t.staged_limit({1 * K: 1.0, 2 * K: 1.0}), 0, "a tie keeps the shorter prefix")
# bounce loses below 16M (cache-resident single copies), wins from 16M
check(t.bounce_from({256 * K: 1.3, 1 * M: 1.16, 4 * M: 1.11, 16 * M: 0.76, 64 * M: 0.65}),
      16 * M, "single copies below 16M")
check(t.bounce_from({256 * K: 0.8, 1 * M: 0.7, 4 * M: 0.7}), 256 * K, "bounce everywhere")
check(t.bounce_from({256 * K: 1.0, 1 * M: 1.0}), 256 * K, "a tie bounces (the default)")
check(t.bounce_from({256 * K: 1.2, 1 * M: 1.3}), 2 * M, "single copies at every measured size")
# a small loss at one size among gains does not keep single copies there
check(t.bounce_from({256 * K: 0.7, 1 * M: 1.05, 4 * M: 0.6}), 256 * K, "one noisy point")
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("OK")
