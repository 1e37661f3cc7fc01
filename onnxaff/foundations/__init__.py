"""Foundations: what every layer may use and that knows no model, session or command line.

Printable names, atomic writes and locks, the progress bar, terminal tables, the memory available, the run's stop
request, a collector's saved state read off its dataclass fields, bfloat16 as numpy knows it.
"""
