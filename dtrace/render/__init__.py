"""Renderers: DataFrames in, text or HTML out. They write nothing; the CLI writes."""
