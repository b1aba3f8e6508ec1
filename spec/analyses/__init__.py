"""Analyses built on the proof layer: gate diffs and their regions, the routing graph, edge-shape cases,
explain, and the mutation score."""
