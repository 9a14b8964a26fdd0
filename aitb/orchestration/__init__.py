"""Orchestration: experiment files, runs and (later) campaigns. Imports every layer."""
