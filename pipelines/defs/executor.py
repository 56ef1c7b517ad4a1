"""The code location's executor: every step in the run's own process.

Steps run one after the other anyway (each stage needs the previous one's files), profiling uses
every core through its own ``torchrun`` processes, and a process per step would import torch,
PyTorch Geometric and scikit-learn again for each.

It is Dagster's in-process executor with one change: a stop signal ends the wait for a pool
slot. A run turns SIGINT and SIGTERM into a flag (Dagster's ``capture_interrupts``) that the
in-process executor reads only when a step starts, so a step waiting for the
``scaledl_profiling`` slot that another live run holds ignored both until the slot was free
(``python -m pipelines.backfill`` kept waiting after SIGTERM). Here the wait looks at the flag
at least every :data:`STOP_CHECK_S` seconds, as Dagster's multiprocess executor does in its
loop: the step does not start, its claim is withdrawn and the run fails as interrupted. The wait
also sleeps between its looks instead of spinning on a core beside the run that profiles.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import dagster as dg

# Dagster exports neither its in-process executor nor the pool-slot wait inside it (dagster
# 1.13, pinned in pyproject): StopAwareInProcessExecutor.execute is InProcessExecutor.execute
# with the concurrency context below.
from dagster._core.definitions.executor_definition import IN_PROC_CONFIG
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._core.events import EngineEventData
from dagster._core.execution.api import ExecuteRunWithPlanIterable
from dagster._core.execution.context_creation_job import PlanExecutionContextManager
from dagster._core.execution.plan.execute_plan import inner_plan_execution_iterator
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext
from dagster._core.execution.retries import RetryMode
from dagster._core.execution.step_dependency_config import StepDependencyConfig
from dagster._core.executor.in_process import InProcessExecutor
from dagster._utils.interrupts import pop_captured_interrupt

#: Longest sleep of a step waiting for a pool slot between two looks at the stop flag (s).
STOP_CHECK_S = 0.5


class StopAwareConcurrencyContext(InstanceConcurrencyContext):
    """Pool-slot claims that raise once a stop signal came, and a wait that sleeps."""

    def claim(self, concurrency_key: str, step_key: str, step_priority: int = 0) -> bool:
        """Claim a slot of pool ``concurrency_key`` for ``step_key``.

        Raises:
            DagsterExecutionInterruptedError: SIGINT or SIGTERM came during the run (its
                pending claims are withdrawn when the context exits).
        """
        if pop_captured_interrupt():
            raise DagsterExecutionInterruptedError(
                f"stopped by a signal while step {step_key} waited for a slot of pool "
                f"{concurrency_key}"
            )
        return super().claim(concurrency_key, step_key, step_priority)

    def interval_to_next_pending_claim_check(self) -> float:
        """Seconds to sleep before the next look at the stop flag and the pending claims.

        Until the next claim is due, at most :data:`STOP_CHECK_S` (Dagster's returns 0: the
        wait spun on a core).
        """
        if not self.has_pending_claims():
            return 0.0
        now = time.time()
        due = min((t - now for t in self._pending_timeouts.values()), default=0.0)
        return min(STOP_CHECK_S, max(0.0, due))


def _plan_iterator(job_context, execution_plan, instance_concurrency_context=None) -> Iterator:
    """Dagster's ``inprocess_execution_iterator`` with :class:`StopAwareConcurrencyContext`."""
    with StopAwareConcurrencyContext(job_context.instance, job_context.dagster_run) as context:
        yield from inner_plan_execution_iterator(job_context, execution_plan, context)


class StopAwareInProcessExecutor(InProcessExecutor):
    """Dagster's in-process executor whose wait for a pool slot ends on SIGINT or SIGTERM."""

    def execute(self, plan_context, execution_plan) -> Iterator[dg.DagsterEvent]:
        """Run every step of the plan in this process (as ``InProcessExecutor.execute``)."""
        keys = execution_plan.step_keys_to_execute
        yield dg.DagsterEvent.engine_event(
            plan_context,
            f"Executing steps in process (pid: {os.getpid()})",
            event_specific_data=EngineEventData.in_process(os.getpid(), keys),
        )
        yield from ExecuteRunWithPlanIterable(
            execution_plan=plan_context.execution_plan,
            iterator=_plan_iterator,
            execution_context_manager=PlanExecutionContextManager(
                job=plan_context.job,
                retry_mode=plan_context.retry_mode,
                execution_plan=plan_context.execution_plan,
                run_config=plan_context.run_config,
                dagster_run=plan_context.dagster_run,
                instance=plan_context.instance,
                raise_on_error=plan_context.raise_on_error,
                output_capture=plan_context.output_capture,
                step_dependency_config=self.step_dependency_config,
            ),
        )
        yield dg.DagsterEvent.engine_event(
            plan_context,
            f"Finished steps in process (pid: {os.getpid()})",
            event_specific_data=EngineEventData.in_process(os.getpid(), keys),
        )


@dg.executor(name="in_process", config_schema=IN_PROC_CONFIG)
def stop_aware_in_process_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """:class:`StopAwareInProcessExecutor`, configured as Dagster's ``in_process`` executor."""
    config = init_context.executor_config
    return StopAwareInProcessExecutor(
        retries=RetryMode.from_config(config["retries"]),
        step_dependency_config=StepDependencyConfig.from_config(
            config.get("step_dependency_config")
        ),
    )


@dg.definitions
def executor() -> dg.Definitions:
    """Definitions holding only :func:`stop_aware_in_process_executor`."""
    return dg.Definitions(executor=stop_aware_in_process_executor)
