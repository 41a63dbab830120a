"""Bridges to other engines. Each module imports its engine only when used (optional extras):
``transmuter.integrations.ray`` (the ray extra: ``pip install -e '.[ray]'``) for Ray Data."""
