"""UMind core."""
