"""The code location's executor: every step in the run's own process.

Steps run one after the other anyway (each stage needs the previous one's files), profiling uses
every core through its own ``torchrun`` processes, and a process per step would import torch,
PyTorch Geometric and scikit-learn again for each.
"""

import dagster as dg


@dg.definitions
def executor() -> dg.Definitions:
    """Definitions holding only :data:`dagster.in_process_executor`."""
    return dg.Definitions(executor=dg.in_process_executor)
