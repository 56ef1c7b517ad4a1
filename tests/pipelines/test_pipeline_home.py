from dagster import DagsterInstance

from pipelines.home import INSTANCE_YAML, prepare_home


def test_prepared_home_configures_queue_limits_and_retries(tmp_path):
    home = prepare_home(tmp_path / "home")
    assert (home / "dagster.yaml").resolve() == INSTANCE_YAML.resolve()
    assert prepare_home(home) == home  # idempotent
    with DagsterInstance.from_config(str(home)) as instance:
        # The run queue's limits as the daemon reads them (`concurrency: runs:`).
        concurrency = instance.get_concurrency_config()
        queue = concurrency.run_queue_config
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert {"key": "scaledl/profiling", "limit": 1} in queue.tag_concurrency_limits
        # One profiling step at a time (the pool of profiling_shard and profiling_runs).
        assert concurrency.pool_config.default_pool_limit == 1
        assert instance.run_retries_enabled
        assert instance.run_retries_max_retries == 1
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
