"""Prediction at planner scale: batched, deduplicated, streamed (see :mod:`.predict`)."""
