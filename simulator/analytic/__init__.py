"""Closed forms on numpy: parameter counts, placement, step times, rooflines.

Pure functions of validated config objects; no SimPy, no randomness, no I/O.
"""
