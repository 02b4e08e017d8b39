"""Experiments that reproduce the source papers' findings."""
