"""``torchrun`` that exits as soon as its launch is over: ``python -m scaledl.profiling.agent``.

The same arguments and the same agent as ``torchrun`` (:func:`torch.distributed.run.main`:
rendezvous, workers, monitoring, failure reports). Only a launch that succeeded ends
differently: once the agent has shut its workers and rendezvous down, the process exits without
the interpreter's shutdown (:func:`scaledl.profiling.interrupt.exit_without_finalizing`), which
took about 0.5-1 s of every launch with torch imported. A failure (a worker's error, a stop
signal) raises as in ``torchrun``: its report, exit status 1.
"""

from __future__ import annotations

import sys

from torch.distributed.run import main as torchrun_main

from scaledl.profiling.interrupt import exit_without_finalizing


def main(argv: list[str] | None = None) -> None:
    """Run ``torchrun`` with ``argv`` (default: the command line), then exit with status 0.

    Raises:
        torch.distributed.elastic.multiprocessing.errors.ChildFailedError: a worker failed
            (as ``torchrun``; the process then exits with status 1).
    """
    torchrun_main(sys.argv[1:] if argv is None else argv)
    exit_without_finalizing(0)


if __name__ == "__main__":
    main()
