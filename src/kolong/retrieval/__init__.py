"""Long-document retrieval with embedding models: tasks, readers, evaluation and contrastive fine-tuning."""
