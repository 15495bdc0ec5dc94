"""Runnable example systems built on dbworker; each folder has a README that runs it."""
