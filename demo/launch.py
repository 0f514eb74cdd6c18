"""Run the Procfile for `make demo` with honcho's manager, so that Ctrl-C stops every process cleanly.

Two changes to `honcho start`, each for a reason seen in the demo:

- A stop sends SIGTERM to each process itself, not to its whole process group. qcluster's worker
  processes leave SIGTERM at its default, so a signal to the group killed them and the sentinel
  at once; the cluster's main process then waited forever on a lock the dead sentinel held, until
  honcho's SIGKILL five seconds later. Told alone, qcluster stops its workers itself, letting
  in-flight polls finish (well within honcho's five seconds). Every Procfile line therefore
  `exec`s its program, so the process honcho started is that program and not a shell.
- Stopped by Ctrl-C or SIGTERM, the demo exits 0: make then prints no "Error 130" line.

No Django import: it only starts processes.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from honcho.compat import ProcessManager
from honcho.environ import parse_procfile
from honcho.manager import SIGNALS, Manager
from honcho.printer import Printer


class SignalTheProcessOnly(ProcessManager):
    def terminate(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def run(procfile: Path) -> int:
    manager = Manager(Printer(sys.stdout, colour=sys.stdout.isatty()))
    # honcho 2.0 (pinned) has no option for this; its manager sends stops through this object.
    manager._procmgr = SignalTheProcessOnly()
    for name, command in parse_procfile(procfile.read_text()).processes.items():
        manager.add_process(name, command, env=os.environ.copy())
    manager.loop()
    stopped_by_signal = manager.returncode in {entry["rc"] for entry in SIGNALS.values()}
    if stopped_by_signal:
        print("pollerdash demo stopped. `make demo` starts it again with the same data.", flush=True)
        return 0
    return manager.returncode or 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1] if len(sys.argv) > 1 else "Procfile")))
