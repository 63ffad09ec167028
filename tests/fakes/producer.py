"""A session program with known output: ``producer.py COUNT INTERVAL`` prints COUNT
numbered lines of 50 bytes (``line-00001-xxx...``), one every INTERVAL seconds, then
``PRODUCER DONE``, then waits for input forever. Tests compare transcripts with it."""

import sys
import time


def line(i: int) -> str:
    return f"line-{i:05d}-".ljust(49, "x")


def main() -> None:
    count, interval = int(sys.argv[1]), float(sys.argv[2])
    for i in range(1, count + 1):
        print(line(i), flush=True)
        if interval:
            time.sleep(interval)
    print("PRODUCER DONE", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
