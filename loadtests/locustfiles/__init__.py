"""Locustfiles: tasks and payloads only (`sentiment`, `digits`, `mixed`)."""
