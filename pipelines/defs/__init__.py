"""Assets, checks, resources, jobs and schedules of the ScaleDL pipeline."""
