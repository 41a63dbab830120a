"""Bridges to other engines. Each module imports its engine only when used (optional extras):
``transmuter.integrations.ray`` (``pip install 'transmuter[ray]'``) for Ray Data."""
