"""Text tasks on encoder models, one module per task."""
