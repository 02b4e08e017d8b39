"""Training recipes over the HF Trainer, and collators."""
