"""Maintenance commands for the repository (not part of the user-facing CLI)."""
