"""Input/output helpers shared by the registry and the profile store."""
