"""An agent CLI that does nothing but wait until it is ended, standing in for any kind's
CLI where only what our launch writes matters (tests/test_prune.py): run as
``idle_cli.py NAME ARGS...``. As OpenCode, it does what our plugin does first: makes
the session's record folder (named in ``OPENCODE_CONFIG_CONTENT``) and writes a record
there."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main() -> None:
    config = os.environ.get("OPENCODE_CONFIG_CONTENT")
    if config:
        options = json.loads(config)["plugin"][0][1]
        records = Path(options["records"])
        records.mkdir(parents=True, exist_ok=True)
        (records / "ses_idle.jsonl").write_text('{"type": "started"}\n')
    print(f"IDLE {sys.argv[1]} ready", flush=True)  # the name it was run as
    while True:
        time.sleep(3600)


if __name__ == "__main__":  # not when pytest imports it for its doctests
    main()
