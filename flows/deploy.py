"""`rldag deploy`: the `rldag` flow as a Prefect deployment whose default parameters are a
pipeline (path or resolved text) and overrides.

Two ways to execute its runs, both without Docker: a process work pool (created if missing)
whose worker (`prefect worker start --pool P`) starts each run as a subprocess in the
directory `rldag deploy` ran in; or `serve`, where this process polls for runs itself.
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from prefect import serve
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.deployments.runner import RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.types.entrypoint import EntrypointType
from prefect.workers.process import ProcessWorker

from flows.rl_loop import rldag_run

FLOW_NAME = rldag_run.name  # runs start with: prefect deployment run rldag/<name>


def ensure_process_pool(name: str) -> bool:
    """Create the process work pool `name` unless it exists; True if it was created."""
    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
            return False
        except ObjectNotFound:
            template = ProcessWorker.get_default_base_job_template()
            client.create_work_pool(
                WorkPoolCreate(name=name, type="process", base_job_template=template)
            )
            return True


def build_deployment(
    name: str, parameters: dict[str, object], working_dir: Path, description: str
) -> RunnerDeployment:
    """The deployment of the `rldag` flow, imported by module path (the installed package)
    so a worker or `serve` finds it from any directory; runs start in `working_dir`."""
    return rldag_run.to_deployment(
        name=name,
        parameters=parameters,
        description=description,
        tags=["rldag"],
        job_variables={"working_dir": str(working_dir)},
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def deploy_to_pool(deployment: RunnerDeployment, pool: str) -> UUID:
    """Register `deployment` on the process work pool `pool` (created if missing)."""
    ensure_process_pool(pool)
    return deployment.apply(work_pool_name=pool)


def serve_deployment(deployment: RunnerDeployment, poll_seconds: float) -> None:
    """Register `deployment` and execute its runs in subprocesses of this process until
    interrupted, checking for new runs every `poll_seconds`."""
    deployment.job_variables = {}  # served runs inherit this process's working directory
    serve(deployment, query_seconds=poll_seconds, print_starting_message=False)
