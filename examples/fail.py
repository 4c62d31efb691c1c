"""A job that always fails with exit code 3, to exercise the failed state and its cascade."""

import sys

if __name__ == "__main__":
    print("about to fail on purpose", file=sys.stderr, flush=True)
    sys.exit(3)
