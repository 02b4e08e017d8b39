"""kolong's own models (registered with the transformers Auto classes on `import kolong`)."""
