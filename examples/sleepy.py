"""Sleep for N seconds (argv[1], default 30), reporting progress every second.

A job with a predictable run time, for trying out preemption, cancellation and slot limits.
It does not install a preemption handler, so SIGTERM ends it the default way.
"""

import sys
import time


def main(argv: list[str]) -> int:
    try:
        total = float(argv[1]) if len(argv) > 1 else 30.0
    except ValueError:
        print(f"usage: {argv[0]} [SECONDS]", file=sys.stderr)
        return 2
    start = time.monotonic()
    elapsed = 0.0
    while elapsed < total:
        time.sleep(min(1.0, total - elapsed))
        elapsed = time.monotonic() - start
        print(f"slept {min(elapsed, total):.1f}/{total:g}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
