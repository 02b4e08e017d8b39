"""Official metrics and QA post-processing."""
