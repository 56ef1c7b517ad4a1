"""Input/output helpers shared by every layer: atomic writes, safe reads, schemas, rendering."""
