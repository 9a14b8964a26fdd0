"""Orchestration: experiment and campaign runners (issue 6)."""
