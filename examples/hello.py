"""The smallest useful job: print a few lines, pause briefly, succeed.

Handy for checking that a worker picks jobs up and that their output reaches the logs.
"""

import os
import time


def main() -> None:
    job_id = os.environ.get("JOBD_JOB_ID", "?")
    print(f"hello from job {job_id}", flush=True)
    for i in range(3):
        time.sleep(0.1)
        print(f"line {i + 1} of 3", flush=True)
    print("bye", flush=True)


if __name__ == "__main__":
    main()
