"""Renderers: the same data as text for a person, JSON, SARIF 2.1.0 or JUnit XML for a program."""
