"""Evaluation utilities: benchmark loaders and recall-study helpers."""
