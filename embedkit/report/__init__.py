"""The last stage: experiment results as tables (Markdown, CSV, JSON, rich) and plots."""
